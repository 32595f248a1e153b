"""What a user reads in a run's text (issue 25): what was measured, once, in the units people
use; what was not, each reason once; a share that the numbers beside it give; money in
dollars and cents."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelkit import specs
from accelkit.advisor.projection import project
from accelkit.profiling.run_report import RunReport
from accelkit.report.render import render_projections, render_run

from .helpers import saved_report

torch = pytest.importorskip("torch")

_SCALE = {"": 1.0, "k": 1e-9, "M": 1e-6, "G": 1e-3, "T": 1.0, "P": 1e3}  # to TFLOP/s


def _row(text: str, figure: str) -> str | None:
    rows = [line for line in text.splitlines() if line.startswith(f"{figure}  ")]
    return rows[0][len(figure) :].strip() if rows else None


def _tflops(number: str, prefix: str) -> float:
    return float(number.replace(",", "")) * _SCALE[prefix]


@pytest.fixture(scope="module")
def cpu_runs() -> dict[bool, RunReport]:
    from ..helpers.torch_data import train

    return {calibrate: train(epochs=1, calibrate=calibrate) for calibrate in (False, True)}


def test_a_cpu_run_shows_what_it_measured_and_each_reason_for_the_rest_once(cpu_runs) -> None:
    for report in cpu_runs.values():
        text = render_run(report, 100)
        for empty in ("-%", " - W", "- MHz", "- allocated", "MFU                  -"):
            assert empty not in text, text
        assert _row(text, "GPU") is None and _row(text, "peak memory") is None
        reasons = [line.strip() for line in text.splitlines() if line.startswith("  ")]
        assert len(reasons) == len(set(reasons)), text
        assert text.count("no NVML samples") == 1, text  # utilisation and power: one line
        assert "nothing to scale against" not in text  # one device: nothing to say
        assert "not measured:\n  " in text and "GPU busy (%), power (W): no NVML" in text


def test_after_calibrate_true_no_line_asks_for_it(cpu_runs) -> None:
    assert "calibrate=True measures one" in cpu_runs[False].notes["mfu"]
    calibrated = cpu_runs[True]
    assert "calibrate" not in calibrated.notes["mfu"], calibrated.notes["mfu"]
    text = render_run(calibrated, 100)
    assert "calibrate=True" not in text and "MFU (measured peak)" in text


_RATE = r"([\d,.]+) ([kMGTP]?)FLOP/s"


@settings(max_examples=200, deadline=None)
@given(
    achieved=st.floats(1e-5, 3000.0),
    ceiling=st.floats(1e-5, 5000.0),
)
def test_a_share_is_what_the_numbers_shown_beside_it_give(achieved, ceiling) -> None:
    report = RunReport.from_dict(
        {
            **saved_report(),
            "achieved_tflops": achieved,
            "calibrated_tflops": ceiling,
            "mfu_calibrated": achieved / ceiling,
            "calibration_method": "timed matmuls",
        }
    )
    text = render_run(report, 100)
    shown = re.fullmatch(_RATE, _row(text, "achieved") or "")
    share = re.match(r"([\d,.]+)% of " + _RATE, _row(text, "MFU (measured peak)") or "")
    assert shown and share, text
    ratio = _tflops(*shown.groups()) / _tflops(*share.groups()[1:])
    # the shown share is the shown numbers' ratio, to the rounding of the three
    assert float(share.group(1).replace(",", "")) == pytest.approx(ratio * 100, rel=2e-3, abs=0.06)


def test_a_projection_costs_dollars_and_cents_not_an_exponent() -> None:
    report = RunReport.from_dict(
        {
            **saved_report(),
            "step_time_s": 0.01,
            "steady_steps": 10,
            "flops_per_step": 1e15,
            "batch_size": 8.0,
            "achieved_tflops": 0.1,
            "input_wait_share": 0.0,
            "facts": {"parameters": 1_000_000},
        }
    )
    key = specs.lookup("L4").key
    cheap = project(report, key, 1, 0.0001, mfu=0.4)
    dear = project(report, key, 8, 5000.0, mfu=0.4)
    text = render_projections([cheap, dear], width=200)
    costs = re.findall(r"(?:< )?\$\S+", text)
    assert costs == [f"${dear.cost_per_epoch:,.2f}", "< $0.01"], text


def test_a_cpu_run_is_told_to_profile_its_cpu_not_cuda() -> None:
    from accelkit.advisor import advise

    figures = {
        "framework": "torch",
        "device": "cpu",
        "mfu_calibrated": 0.1,
        "calibrated_tflops": 0.03,
        "achieved_tflops": 0.003,
        "step_time_s": 1.0,
    }
    found = {a.id: a for a in advise(None, None, figures)}
    assert "low_mfu" in found, list(found)
    advice = found["low_mfu"]
    assert (
        "CUDA" not in advice.action and "cuda" not in advice.action and "nsys" not in advice.action
    )
    assert "cpu_time_total" in advice.action and "kernels" not in advice.title
