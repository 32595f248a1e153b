"""The training on the HTML page (issue 39): the loss over the steps, the windows' step
times with their percentiles, MFU per window, and where training paused, marked on the
time axis; a report without them says why in each chart's place."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelkit.profiling.run_report import RunReport
from accelkit.report import training
from accelkit.report.html import render_html

from .test_html import _Page, _report


def test_the_loss_chart_holds_each_epoch_s_and_each_evaluation_s_loss() -> None:
    page = _Page(render_html(_report()))  # 53 steps, two epochs, an evaluation after each
    assert page.ids["chart-loss"] == "svg"
    loss = page.series["chart-loss"]
    assert loss["x"] == [26.5, 53.0]
    assert loss["training loss"] == [2.3, 1.9] and loss["evaluation loss"] == [2.2, 2.0]


def test_evaluations_not_one_per_epoch_spread_over_the_run_and_say_so() -> None:
    report = _report(losses=[2.0], eval_losses=[2.5, 2.2, 2.1, 2.0])
    found = training.losses(report)
    assert found is not None and not found.evaluations_per_epoch
    assert [x for x, _ in found.evaluation] == [13.25, 26.5, 39.75, 53.0]
    assert "spread evenly over the run" in render_html(report)


def test_the_step_time_spread_shows_percentiles_of_the_windows_and_says_so() -> None:
    report = _report()
    text = render_html(report)
    page = _Page(text)
    assert page.ids["chart-step-spread"] == "svg"
    assert sum(page.series["chart-step-spread"]["windows"]) == 5
    assert "p50 100.0 ms" in text and "p95 144.0 ms" in text and "p99 148.8 ms" in text
    assert "not each step&#x27;s" in text  # only window means exist: the page says so


def test_mfu_per_window_is_the_window_formula_on_each_window() -> None:
    report = _report()
    page = _Page(render_html(report))
    mfu = page.series["chart-mfu-time"]
    assert mfu["x"] == report.series["time_s"]
    expected = [1e12 / t / 1e12 / 989.0 * 100 for t in report.series["step_time_s"]]
    assert mfu["MFU"] == pytest.approx(expected)


def test_without_a_datasheet_peak_the_chart_is_of_achieved_flops() -> None:
    report = _report(peak_tflops=None, mfu=None, calibrated_tflops=None, mfu_calibrated=None)
    name, values = training.window_mfu(report) or ("", [])
    assert name == "achieved_tflops" and values[0] == pytest.approx(10.0)
    assert "no peak to take MFU against" in render_html(report)


def test_pauses_are_marked_on_the_time_axes_naming_what_they_were() -> None:
    series = {**_report().series, "time_s": [1.0, 2.0, 4.5, 5.5, 7.0]}  # 1.3 s stopped in 3
    report = _report(series=series)
    assert training.pauses(report.series) == [(4.5, pytest.approx(1.3))]
    text = render_html(report)
    assert text.count('class="marks" data-values="4.5"') == 2  # throughput and MFU
    assert "Dashed lines (evaluation or the rest)" in text and "the run evaluated for 1.5 s" in text
    only_evaluation = render_html(_report(series=series, other_seconds=0.0))
    assert "Dashed lines (evaluation)" in only_evaluation


def test_an_older_report_says_why_each_training_chart_is_missing() -> None:
    report = RunReport("torch", "m", "cpu", "fp32", "fp32", steps=10)
    text = render_html(report)
    page = _Page(text)
    for chart in ("chart-loss", "chart-step-spread", "chart-mfu-time"):
        assert page.ids[chart] == "p", chart
    assert "No chart: no loss recorded" in text
    assert "No chart: no steady-state window measured" in text


@given(st.lists(st.floats(0, 1e3) | st.none(), max_size=40))
def test_the_spread_counts_every_known_window_once(values: list[float | None]) -> None:
    found = training.spread(values)
    known = sorted(v for v in values if v is not None)
    if not known:
        assert found is None
        return
    assert found is not None and sum(found.counts) == len(known) == found.windows
    assert len(found.edges) == len(found.counts) + 1
    assert known[0] <= found.percentiles[50] <= found.percentiles[95] <= found.percentiles[99]
    assert found.percentiles[99] <= known[-1]
