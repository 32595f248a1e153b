"""The HTML page as people read it (issue 25): every chart text readable on what it is drawn
on (WCAG AA, 4.5:1), a legend where a chart has several series, round ticks on the axes, the
utilisation axis ending at 100%, the MFU scale in the unit it is labelled with, and a headline
row of the figures that matter."""

from __future__ import annotations

import itertools
import re
import xml.etree.ElementTree as ET

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from accelkit.profiling.run_report import RunReport
from accelkit.report import svg
from accelkit.report.html import render_html

from .helpers import saved_report
from .test_html import _report

_SVG = "{http://www.w3.org/2000/svg}"
_STYLESHEET_FILL = "#444444"  # what the page's stylesheet gave a text without its own


def _luminance(color: str) -> float:
    """WCAG 2.1 relative luminance of ``#rrggbb``."""
    linear = [
        c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4
        for c in (int(color[i : i + 2], 16) / 255 for i in (1, 3, 5))
    ]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def _ratio(a: str, b: str) -> float:
    light, dark = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def _charts(page: str) -> dict[str, ET.Element]:
    return {
        chart.get("id"): chart
        for chart in (ET.fromstring(m) for m in re.findall(r"<svg .*?</svg>", page, re.DOTALL))
    }


def _fill(element: ET.Element, parents: dict) -> str:
    """The fill of a text: its style's, else the stylesheet's; of a shape: its own or its
    group's."""
    style = re.search(r"fill:\s*(#[0-9a-fA-F]{6})", element.get("style", ""))
    if element.tag == f"{_SVG}text":
        return style.group(1) if style else _STYLESHEET_FILL
    while element is not None and not element.get("fill"):
        element = parents.get(element)
    return element.get("fill") if element is not None else "#ffffff"


def _texts_and_grounds(chart: ET.Element) -> list[tuple[str, str, str]]:
    """Each text of `chart` with its colour and the colour under its anchor point: the
    last filled rectangle drawn there, else the white page."""
    parents = {child: parent for parent in chart.iter() for child in parent}
    rects = [r for r in chart.iter(f"{_SVG}rect") if r.get("height")]
    found = []
    for text in chart.iter(f"{_SVG}text"):
        x, y = float(text.get("x")), float(text.get("y")) - 4  # the middle of the glyphs
        under = [
            r
            for r in rects
            if float(r.get("x")) <= x <= float(r.get("x")) + float(r.get("width"))
            and float(r.get("y")) <= y <= float(r.get("y")) + float(r.get("height"))
        ]
        ground = _fill(under[-1], parents) if under else "#ffffff"
        found.append((text.text or "", _fill(text, parents), ground))
    return found


def _pages() -> list[str]:
    cpu = RunReport.from_dict(
        {
            **saved_report(),
            "achieved_tflops": 0.0112,
            "calibrated_tflops": 0.0297,
            "mfu_calibrated": 0.0112 / 0.0297,
            "run_seconds": 114.0,
            "training_seconds": 100.0,
            "evaluation_seconds": 10.0,
            "other_seconds": 4.0,
        }
    )
    return [render_html(_report()), render_html(cpu)]


def test_every_chart_text_reads_at_4_5_to_1_on_what_it_is_drawn_on() -> None:
    for page in _pages():
        for chart_id, chart in _charts(page).items():
            for text, color, ground in _texts_and_grounds(chart):
                assert _ratio(color, ground) >= 4.5, (chart_id, text, color, ground)


def test_every_palette_colour_takes_a_readable_text() -> None:
    for color in svg.COLORS:
        assert _ratio(svg.ink_on(color), color) >= 4.5, color


def _legend(chart: ET.Element) -> list[str]:
    return [
        t.text
        for g in chart.iter(f"{_SVG}g")
        if g.get("class") == "legend"
        for t in g.iter(f"{_SVG}text")
    ]


def _ticks(chart: ET.Element) -> list[float]:
    """The numbers written left of the y axis (right-aligned at its left)."""
    return [
        float(t.text.replace(",", ""))
        for t in chart.iter(f"{_SVG}text")
        if t.get("text-anchor") == "end" and float(t.get("x")) < 64 and t.text
    ]


def test_the_step_time_bars_have_a_legend_and_the_axes_round_ticks() -> None:
    charts = _charts(_pages()[0])
    assert _legend(charts["chart-step-breakdown"]) == ["compute", "input wait", "idle"]
    for chart_id in ("chart-throughput", "chart-step-breakdown", "chart-gpu-power"):
        ticks = _ticks(charts[chart_id])
        assert len(ticks) >= 3, (chart_id, ticks)
        steps = {round(b - a, 9) for a, b in itertools.pairwise(ticks)}
        assert len(steps) == 1, (chart_id, ticks)  # evenly spaced, from 0
        assert ticks[0] == 0


def test_the_utilisation_axis_ends_at_100_percent() -> None:
    ticks = _ticks(_charts(_pages()[0])["chart-gpu-utilization"])
    assert max(ticks) == 100


def test_the_mfu_scale_is_in_the_unit_it_is_labelled_with() -> None:
    for page, unit, largest in ((_pages()[0], "TFLOP/s", 989.0), (_pages()[1], "GFLOP/s", 29.7)):
        chart = _charts(page)["chart-mfu"]
        texts = [t.text for t in chart.iter(f"{_SVG}text")]
        assert unit in texts, texts
        scale = [
            float(t.text.replace(",", ""))
            for t in chart.iter(f"{_SVG}text")
            if t.get("text-anchor") in ("middle", "end") and re.fullmatch(r"[\d,.]+", t.text or "")
        ]
        assert largest <= max(scale) <= 2 * largest, scale  # the axis runs just past the peak


def test_the_page_opens_with_a_row_of_the_figures_that_matter() -> None:
    page = _pages()[0]
    row = re.search(r'<div class="headline" id="headline">(.*?)</div>\n', page, re.DOTALL)
    assert row, page[:2000]
    for shown in ("600.0 samples/s", "1.0%", "9.500 TFLOP/s", "12.0%", "70%"):
        assert shown in row.group(1), shown
    assert page.index('id="headline"') < page.index('id="chart-phases"')


def test_the_figures_are_a_table_not_a_terminal_s_text() -> None:
    page = _pages()[0]
    assert '<table id="figures">' in page and "<pre>accelkit run:" not in page


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.floats(0, 1e9), min_size=1, max_size=8))
@example(values=[5e-324])  # a subnormal top: its fifth underflowed to 0 (log10 of 0)
@example(values=[1.1125369292536007e-308])  # a tick at the top was labelled below it
def test_the_y_axis_runs_just_past_the_largest_value(values) -> None:
    chart = ET.fromstring(
        svg.line_chart("c", "t", list(range(len(values))), [("v", values)], x_label="", y_label="")
    )
    ticks = _ticks(chart)
    top = max(values)
    assert ticks[0] == 0 and len(ticks) >= 2
    assert max(ticks) >= top * 0.999 and (top == 0 or max(ticks) <= 2.5 * top + 1e-9), ticks


@pytest.mark.parametrize("share", [0.96, 1.0])
def test_a_percentage_axis_stops_at_100(share) -> None:
    chart = ET.fromstring(
        svg.line_chart(
            "c", "t", [0, 1], [("u", [50.0, share * 100])], x_label="", y_label="%", y_max=100
        )
    )
    assert max(_ticks(chart)) == 100
