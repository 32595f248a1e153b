"""The run's figures for the loggers (`metrics.run_figures`), named apart from the
windows' series in every ecosystem (`metrics.spell(..., run=True)`)."""

from __future__ import annotations

import pytest

from accelkit.profiling import metrics
from accelkit.profiling.run_report import RunReport


def _report(**fields) -> RunReport:
    return RunReport(
        framework="torch", model="m", device="cpu", precision="fp32", matmul_dtype="fp32", **fields
    )


@pytest.mark.parametrize("ecosystem", ["keras", "lightning", "hf"])
def test_no_run_figure_shares_a_name_with_a_window_series(ecosystem) -> None:
    windows = {metrics.spell(metric.name, ecosystem) for metric in metrics.METRICS}
    run = {metrics.spell(name, ecosystem, run=True) for name in metrics.RUN_FIGURES}
    assert len(run) == len(metrics.RUN_FIGURES)
    assert not windows & run


def test_run_figures_are_the_reports_numbers() -> None:
    report = _report(
        step_time_s=0.25,
        mfu=0.4,
        flops_per_step=3e12,
        peak_memory_bytes=2**30,
        global_samples_per_second=512.0,
        advice=[{"id": "low_mfu"}, {"id": "input_bound"}],
    )
    figures = metrics.run_figures(report)
    assert figures == {
        "step_time_s": 0.25,
        "mfu": 0.4,
        "flops_per_step": 3e12,
        "peak_memory_bytes": float(2**30),
        "advice_count": 2.0,
    }  # one rank: no figure of all ranks; None: left out
    several = metrics.run_figures(_report(world_size=2, global_samples_per_second=512.0))
    assert several["global_samples_per_second"] == 512.0
    assert metrics.spelled(figures, "hf", run=True)["accelkit/run/advice_count"] == 2.0
    assert metrics.spell("mfu", "keras", run=True) == "accelkit_run_mfu"
