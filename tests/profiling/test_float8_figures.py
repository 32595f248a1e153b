"""MFU under float8 (issue 36): MFU stays against the bf16 dense peak; beside it the share
of the step's FLOPs that ran in float8 and the utilisation against the peaks those FLOPs
could reach, by one formula for a logging window and for the run."""

from __future__ import annotations

import math
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelkit import specs
from accelkit.hardware.info import GpuInfo, HardwareInfo
from accelkit.planning import Request, plan
from accelkit.profiling import metrics
from accelkit.profiling.assemble import Measurements, report_from
from accelkit.profiling.clock import ClockSummary, WindowSums
from accelkit.profiling.metrics import float8_figures, spelled, window_figures
from accelkit.profiling.options import MeterOptions
from accelkit.profiling.recorder import Recorder


def _snapshot(name: str, cc: tuple[int, int]) -> HardwareInfo:
    return HardwareInfo(gpus=(GpuInfo(0, name, compute_capability=cc),), source="snapshot")


H200 = _snapshot("NVIDIA H200", (9, 0))
A100 = _snapshot("NVIDIA A100-SXM4-80GB", (8, 0))
H800 = _snapshot("NVIDIA H800", (9, 0))
P_BF16 = specs.lookup("NVIDIA H200").peak("bf16")
P_FP8 = specs.lookup("NVIDIA H200").peak("fp8")

STEPS, SECONDS = 10, 2.0
FLOPS = 4.0e14  # a step's counted FLOPs
FLOAT8 = 2.5e14  # of which ran in float8: 6 x in x out x tokens over the converted layers


def _report(float8=FLOAT8, *, hardware=H200, flops=FLOPS, precision="bf16"):
    clock = ClockSummary(
        steps=STEPS + 2,
        warmup_steps=2,
        warmup_s=1.0,
        steady_steps=STEPS,
        steady_s=SECONDS,
        steady_samples=STEPS * 8,
        steady_tokens=0,
        input_wait_s=0.0,
        total_s=SECONDS + 1.0,
        window_step_s=[],
    )
    return report_from(
        Measurements(
            framework="torch",
            model="m",
            device="cuda:0",
            plan=plan(hardware, Request(framework="torch", precision=precision)),
            hardware=hardware,
            clock=clock,
            flops_per_step=flops,
            float8_flops_per_step=float8,
        )
    )


def test_the_h200_peaks_are_the_datasheet_s() -> None:
    assert (P_BF16, P_FP8) == (989.4, 1978.9)


def test_mfu_stays_against_bf16_and_the_float8_figures_are_computed_by_hand() -> None:
    report = _report()
    step_s = SECONDS / STEPS
    assert report.peak_tflops == P_BF16
    assert report.mfu == pytest.approx(FLOPS / step_s / (P_BF16 * 1e12))
    assert report.float8_share == pytest.approx(FLOAT8 / FLOPS)
    at_peak_s = FLOAT8 / (P_FP8 * 1e12) + (FLOPS - FLOAT8) / (P_BF16 * 1e12)
    assert report.precision_mfu == pytest.approx(at_peak_s / step_s)
    assert report.precision_mfu < report.mfu
    assert "float8_share" not in report.notes
    assert "dense fp8 1978.9 TFLOP/s" in report.notes["precision_mfu"]


def test_precision_fp8_keeps_mfu_against_the_bf16_peak() -> None:
    report = _report(precision="fp8")
    assert report.precision == "fp8" and report.matmul_dtype == "bf16"
    assert report.peak_tflops == P_BF16
    assert report.mfu == _report().mfu and report.precision_mfu == _report().precision_mfu


@pytest.mark.parametrize("float8", [None, 0, 0.0])
def test_without_float8_there_is_no_figure_and_no_note(float8) -> None:
    report = _report(float8)
    assert report.float8_share is None and report.precision_mfu is None
    assert report.mfu is not None
    assert not {"float8_share", "precision_mfu"} & report.notes.keys()
    assert not {"float8_share", "precision_mfu"} & _window(_recorder(float8)).keys()


def test_without_an_fp8_peak_the_share_stands_and_a_note_says_why() -> None:
    report = _report(hardware=A100)  # no float8 tensor path in its datasheet
    assert report.mfu is not None and report.float8_share == pytest.approx(FLOAT8 / FLOPS)
    assert report.precision_mfu is None
    assert "no fp8 tensor path" in report.notes["precision_mfu"]


def test_without_mfu_the_note_is_mfu_s_own() -> None:
    report = _report(hardware=H800)  # known by name, no public peaks
    assert report.mfu is None and report.precision_mfu is None
    assert report.notes["precision_mfu"] == report.notes["mfu"]


def test_float8_flops_above_the_count_are_capped_with_a_note() -> None:
    report = _report(float8=2 * FLOPS)
    assert report.float8_share == 1.0
    assert report.precision_mfu == pytest.approx(report.mfu * P_BF16 / P_FP8)
    assert "exceed flops_per_step" in report.notes["float8_share"]


def test_without_flops_per_step_one_reason_says_why_for_both() -> None:
    report = _report(flops=None)
    assert report.float8_share is None and report.precision_mfu is None
    assert report.notes["float8_share"] == report.notes["precision_mfu"]
    assert "ran in float8" in report.notes["float8_share"]


# -- one formula, one window --------------------------------------------------------------


def _recorder(float8) -> Recorder:
    recorder = Recorder(
        MeterOptions(warmup=0, window=2, sample_gpu=False, flops_per_step=FLOPS),
        plan=plan(H200, Request(framework="torch")),
    )
    recorder.set_peak(H200, "bf16")
    recorder.set_float8_flops(float8)
    return recorder


def _window(recorder: Recorder) -> dict[str, float]:
    with recorder:
        for _ in range(4):
            recorder.clock.step_begin()
            time.sleep(0.002)
            recorder.clock.step_done(samples=8)
    return recorder.take_figures(close=True)


def test_the_windows_and_the_run_agree() -> None:
    recorder = _recorder(FLOAT8)
    window = _window(recorder)
    report = report_from(
        recorder.measurements(framework="torch", model="m", device="cuda:0", hardware=H200)
    )
    for name in ("mfu", "float8_share", "precision_mfu"):
        assert window[name] == pytest.approx(getattr(report, name), rel=1e-9), name
    assert window["precision_mfu"] == pytest.approx(
        window["mfu"] * (1 - FLOAT8 / FLOPS + FLOAT8 / FLOPS * P_BF16 / P_FP8)
    )


def test_the_loggers_get_the_figures_by_their_names() -> None:
    logged = spelled(_window(_recorder(FLOAT8)), "lightning")
    assert {"accelkit/float8_share", "accelkit/precision_mfu"} <= logged.keys()
    assert "accelkit_float8_share" in spelled(_window(_recorder(FLOAT8)), "keras")
    assert metrics.label("float8_share") == "float8 share"
    assert metrics.label("mfu") == "MFU"  # the name non-float8 runs have always shown


def test_undoing_float8_clears_the_figures() -> None:
    recorder = _recorder(FLOAT8)
    recorder.set_float8_flops(None)
    assert recorder.float8_flops_per_step is None
    assert "float8_share" not in _window(recorder)


@pytest.mark.parametrize("value", [-1.0, math.nan, math.inf])
def test_a_float8_count_that_is_no_count_is_refused(value) -> None:
    with pytest.raises(ValueError, match="float8 FLOPs per step"):
        _recorder(None).set_float8_flops(value)


# -- properties ---------------------------------------------------------------------------

_flops = st.floats(1e6, 1e18)
_peaks = st.floats(1.0, 1e4)


@settings(max_examples=300, deadline=None)
@given(
    flops=_flops,
    fraction=st.floats(0.0, 1.5),
    peak=_peaks,
    ratio=st.floats(1.0, 8.0),
    mfu=st.floats(0.0, 1.0),
)
def test_precision_mfu_is_at_most_mfu_where_fp8_is_the_faster_path(
    flops, fraction, peak, ratio, mfu
) -> None:
    float8 = flops * fraction
    figures = float8_figures(
        mfu,
        flops_per_step=flops,
        float8_flops_per_step=float8,
        peak_tflops=peak,
        float8_peak_tflops=peak * ratio,
    )
    if not float8:
        assert figures == {"float8_share": None, "precision_mfu": None}
        return
    share, precision = figures["float8_share"], figures["precision_mfu"]
    assert 0.0 < share <= 1.0
    assert mfu / ratio * (1 - 1e-12) <= precision <= mfu * (1 + 1e-12)
    if ratio == 1.0:
        assert precision == pytest.approx(mfu)


@settings(max_examples=100, deadline=None)
@given(flops=_flops, mfu=st.floats(0.0, 1.0), peak=_peaks)
def test_a_vanishing_float8_share_gives_mfu_back(flops, mfu, peak) -> None:
    figures = float8_figures(
        mfu,
        flops_per_step=flops,
        float8_flops_per_step=flops * 1e-12,
        peak_tflops=peak,
        float8_peak_tflops=2 * peak,
    )
    assert figures["precision_mfu"] == pytest.approx(mfu, rel=1e-9, abs=1e-15)


@settings(max_examples=200, deadline=None)
@given(
    steps=st.integers(1, 10_000),
    seconds=st.floats(1e-3, 1e5),
    flops=_flops,
    fraction=st.floats(0.0, 1.0),
)
def test_a_window_s_figures_are_the_formula_s(steps, seconds, flops, fraction) -> None:
    sums = WindowSums(steps=steps, samples=steps, tokens=0, input_wait_s=0.0, seconds=seconds)
    figures = window_figures(
        sums,
        flops_per_step=flops,
        peak_tflops=P_BF16,
        float8_flops_per_step=flops * fraction,
        float8_peak_tflops=P_FP8,
    )
    if not fraction:
        assert "float8_share" not in figures and "precision_mfu" not in figures
        return
    at_peak_s = (flops * fraction / P_FP8 + flops * (1 - fraction) / P_BF16) / 1e12
    assert figures["precision_mfu"] == pytest.approx(at_peak_s * steps / seconds, rel=1e-9)
    assert figures["precision_mfu"] <= figures["mfu"] * (1 + 1e-12)
