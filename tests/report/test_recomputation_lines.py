"""HFU beside MFU in the text and HTML reports, only where activations were recomputed
(issue 26, 4): a run that checkpoints shows what the recomputed forward costs; any other
run reads as before. The new figures save and load with the report."""

from __future__ import annotations

import json

import pytest

import accelkit  # noqa: F401 - gives the report its table and page
from accelkit.profiling.run_report import RunReport
from accelkit.report.render import render_run

FIGURES = {
    "steady_steps": 10,
    "steady_seconds": 1.0,
    "flops_per_step": 6e12,
    "achieved_tflops": 60.0,
    "peak_tflops": 989.0,
    "peak_source": "H100 SXM dense bf16 989 TFLOP/s",
    "mfu": 60.0 / 989.0,
}


def _report(**figures) -> RunReport:
    return RunReport("torch", "m", "cuda:0", "bf16", "bf16", **{**FIGURES, **figures})


def _hfu_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("HFU")]


def test_a_checkpointed_run_shows_hfu_beside_mfu() -> None:
    report = _report(hardware_flops_per_step=8e12, hardware_tflops=80.0, hfu=80.0 / 989.0)
    (line,) = _hfu_lines(render_run(report))
    assert "8.1%" in line and "8.00 TFLOP/step" in line and "recomputed forward" in line
    page = report.to_html()
    assert "HFU 8.1% (8.00 TFLOP/step, the recomputed forward counted)" in page


@pytest.mark.parametrize(
    "figures",
    [
        {"hardware_flops_per_step": 6e12, "hardware_tflops": 60.0, "hfu": 60.0 / 989.0},
        {},  # a report saved before HFU, or flops_per_step given by the user
    ],
    ids=["nothing recomputed", "not known"],
)
def test_other_runs_show_no_hfu(figures) -> None:
    report = _report(**figures)
    assert not _hfu_lines(render_run(report))
    assert "HFU" not in report.to_html()


def test_without_a_peak_the_hardware_flops_are_shown() -> None:
    report = _report(hardware_flops_per_step=8e12, peak_tflops=None, mfu=None, peak_source="no GPU")
    rows = [line for line in render_run(report).splitlines() if "recomputed forward" in line]
    assert rows and rows[0].startswith("hardware FLOPs/step")


def test_the_new_figures_save_and_load() -> None:
    report = _report(hardware_flops_per_step=8e12, hardware_tflops=80.0, hfu=80.0 / 989.0)
    saved = json.loads(json.dumps(report.to_dict()))
    assert saved["hfu"] == report.hfu and saved["hardware_flops_per_step"] == 8e12
    assert RunReport.from_dict(saved) == report


def test_hfu_without_its_peak_is_a_damaged_report() -> None:
    saved = _report(hfu=0.1, peak_tflops=None, mfu=None).to_dict()
    with pytest.raises(ValueError, match=r"hfu.*peak_tflops"):
        RunReport.from_dict(saved)
