"""The HTML report's run-time chart: the run's wall time split into training, evaluation
and the rest, with the numbers of the report, a legend and a reason where there are none."""

from __future__ import annotations

import re

import pytest

from accelkit.profiling.metrics import BY_NAME
from accelkit.profiling.run_report import RunReport
from accelkit.report import svg
from accelkit.report.html import CHARTS, render_html

from .helpers import saved_report
from .test_html import _Page, _report


def test_the_phases_chart_holds_each_phase_s_seconds_with_a_legend_and_caption() -> None:
    text = render_html(_report())  # 7.5 s: training 5.5, evaluation 1.5, other 0.5
    page = _Page(text)
    assert page.ids.get("chart-phases") == "svg"
    assert page.values["chart-phases"] == {"training": 5.5, "evaluation": 1.5, "other": 0.5}
    legend = re.search(r'<g class="legend">(.*?)</g>', text).group(1)
    for key in ("training 5.5 s (73%)", "evaluation 1.5 s (20%)", "other 0.5 s (7%)"):
        assert f">{key}</text>" in legend
    assert "7.5 s = training 5.5 s (73%), evaluation 1.5 s (20%), other 0.5 s (7%)" in text
    assert "checkpoints" in text  # the caption says what "other" holds
    assert text.index('id="chart-phases"') < text.index('id="chart-throughput"')


def test_the_parts_fill_the_bar_in_proportion() -> None:
    chart = svg.parts_bar("c", "t", [("a", 3.0), ("b", 1.0)], unit="s", total=4.0)
    widths = [float(w) for w in re.findall(r'<rect x="[\d.]+" y="\d+" width="([\d.]+)"', chart)]
    plot = svg.WIDTH - 64 - 16
    assert widths[:2] == pytest.approx([plot * 0.75, plot * 0.25], abs=0.01)


def test_a_long_legend_wraps_inside_the_chart() -> None:
    parts = [(f"phase number {n} with a long name", 1.0) for n in range(6)]
    chart = svg.parts_bar("c", "t", parts, unit="s")
    xs = [float(x) for x in re.findall(r'<rect x="([\d.]+)" y="[\d.]+" width="10"', chart)]
    assert len(xs) == 6 and max(xs) < svg.WIDTH - 100
    height = int(re.search(r'viewBox="0 0 \d+ (\d+)"', chart).group(1))
    texts = re.findall(r'<text x="[\d.]+" y="([\d.]+)"[^>]*>phase', chart)
    last_text_y = max(float(y) for y in texts)
    assert last_text_y < height


def test_a_phase_that_took_no_time_is_left_out_of_the_chart() -> None:
    page = _Page(render_html(_report(evaluation_seconds=0.0, other_seconds=2.0)))
    assert page.values["chart-phases"] == {"training": 5.5, "other": 2.0}


def test_a_report_saved_before_the_phases_says_why_it_has_no_chart() -> None:
    report = RunReport.from_dict(saved_report())
    text = render_html(report)
    page = _Page(text)
    assert page.ids.get("chart-phases") == "p"
    assert "No chart: the run&#x27;s phases were not recorded" in text
    assert all(chart in page.ids for chart in CHARTS)


def test_the_page_names_its_figures_as_every_logger_does() -> None:
    page = _Page(render_html(_report()))
    drawn = {
        "chart-throughput": "samples_per_second",
        "chart-step-breakdown": "input_wait_share",
        "chart-gpu-utilization": "gpu_utilization",
        "chart-gpu-power": "power_w",
        "chart-gpu-memory": "gpu_memory_used_bytes",
    }
    for chart, figure in drawn.items():
        assert BY_NAME[figure].label in page.series[chart], (chart, page.series[chart].keys())
