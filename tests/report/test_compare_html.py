"""`accelkit report --compare BASE.json NEW.json --html FILE`: both runs on one
self-contained page, the differences first (figures with verdicts, set-up, advice),
then the curves overlaid, BASE and NEW; a series one run lacks is named with the reason.
Real CPU fits (`compare_runs`), parsed with the standard library; in Chromium where it is
installed, at a desktop's width and a phone's.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from accelkit.cli import EXIT_USAGE, main
from accelkit.report.comparison import compare, load
from accelkit.report.comparison.curves import CHARTS
from accelkit.report.comparison.html import render_comparison_html
from accelkit.report.comparison.text import figure_text
from accelkit.report.svg import COLORS

from .compare_runs import report, scaled, steady, torch_run, write
from .test_html import _Page, _report


def _page(tmp_path: Path, base: dict, new: dict) -> str:
    paths = [write(data, str(tmp_path), name) for data, name in ((base, "b.json"), (new, "n.json"))]
    return render_comparison_html(compare(*paths), load(paths[0])[0], load(paths[1])[0])


def _run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def test_the_differences_come_first_with_both_runs_figures_and_the_verdicts(tmp_path) -> None:
    base, new = steady(torch_run()), steady(scaled(torch_run(), 1.5))
    text = _page(tmp_path, base, new)
    page = _Page(text)
    assert page.ids["compare-figures"] == "table"
    headings = ["Figures", "What differs in the set-up", "Advice", "Curves"]
    where = [text.index(f"<h2>{h}</h2>") for h in headings]
    assert where == sorted(where)
    before = figure_text("step_time_s", base["step_time_s"])
    assert f'<tr data-figure="step_time_s"><td>step time</td><td>{before} <span' in text
    assert figure_text("step_time_s", new["step_time_s"]) in text
    assert '<td class="verdict verdict-slower">slower</td>' in text
    assert "<strong>+50.0%</strong>" in text and "slower, beyond the runs&#x27; noise" in text


def test_the_curves_of_both_runs_are_overlaid_with_their_numbers(tmp_path) -> None:
    base, new = torch_run(), torch_run(width=256, batch=64)
    page = _Page(_page(tmp_path, base, new))
    for chart in CHARTS:
        assert chart in page.ids, chart
    assert page.ids["compare-changes"] == "table"  # the wider model on larger batches
    throughput = page.series["chart-compare-throughput"]
    for role, data in (("BASE", base), ("NEW", new)):
        by_step = dict(zip(throughput["x"], throughput[role], strict=True))
        series = data["series"]
        assert [by_step[s] for s in series["step"]] == series["samples_per_second"]
    loss = page.series["chart-compare-loss"]
    assert [v for v in loss["BASE"] if v is not None] == base["losses"]
    assert [v for v in loss["NEW"] if v is not None] == new["losses"]
    step_time = page.series["chart-compare-step-time"]  # a CPU's steps: in ms
    assert [v for v in step_time["NEW"] if v is not None] == pytest.approx(
        [v * 1e3 for v in new["series"]["step_time_s"]]
    )
    assert set(page.series["chart-compare-mfu"]) == {"x", "BASE", "NEW"}  # GFLOP/s, no peak
    assert page.ids["compare-legend"] == "p"


def test_advice_that_came_and_went_is_listed() -> None:
    base, new = torch_run(), torch_run()
    base["advice"] = [{"id": "input_bound", "title": "input-bound"}]
    new["advice"] = [{"id": "use_bf16", "title": "use bf16"}]
    runs = report(base), report(new)
    page = _Page(render_comparison_html(compare(*runs), *runs))
    assert page.ids["advice-appeared"] == "ul" and page.ids["advice-gone"] == "ul"
    text = render_comparison_html(compare(*runs), *runs)
    assert "<li><strong>use_bf16</strong>: use bf16</li>" in text.split('id="advice-gone"')[0]
    assert "<li><strong>input_bound</strong>: input-bound</li>" in text.split('id="advice-gone"')[1]


def test_the_page_is_self_contained_and_escapes_text(tmp_path) -> None:
    base, new = torch_run(), torch_run()
    new["model"] = "<b>mlp</b> & co"
    text = _page(tmp_path, base, new)
    assert _Page(text).fetching == []
    assert "<script" not in text and 'src="http' not in text and "<link" not in text
    assert "<b>mlp</b>" not in text and "&lt;b&gt;mlp&lt;/b&gt; &amp; co" in text


def test_a_series_one_run_lacks_is_named_with_the_reason(tmp_path) -> None:
    base, new = torch_run(), torch_run()
    new["losses"] = []
    text = _page(tmp_path, base, new)
    page = _Page(text)
    loss = page.series["chart-compare-loss"]
    assert any(v is not None for v in loss["BASE"])
    assert set(loss["NEW (none)"]) == {None}  # in the legend, nothing drawn
    assert '<p class="missing" data-run="NEW"><strong>NEW</strong> has no training loss: ' in text
    assert '<p class="missing" data-run="BASE">' not in text.split("chart-compare-eval-loss")[0]
    # neither CPU fit evaluated: no chart, and each run named with its reason
    assert page.ids["chart-compare-eval-loss"] == "p"
    for role in ("BASE", "NEW"):
        assert f"<strong>{role}</strong> has no evaluation loss: it did not evaluate." in text


def test_mfu_beside_a_run_without_a_peak_is_drawn_for_the_one_with_it() -> None:
    gpu, cpu = _report(), report(torch_run())
    page = _Page(render_comparison_html(compare(gpu, cpu), gpu, cpu))
    mfu = page.series["chart-compare-mfu"]
    assert all(v is not None and 0 < v < 100 for v in mfu["BASE"])  # percent
    assert set(mfu["NEW (none)"]) == {None}
    text = render_comparison_html(compare(gpu, cpu), gpu, cpu)
    assert "<strong>NEW</strong> has no MFU per window: no peak to take MFU against" in text


def test_the_cli_writes_the_page_and_says_where_on_stderr(tmp_path) -> None:
    base = write(torch_run(), str(tmp_path), "base.json")
    new = write(torch_run(width=256, batch=64), str(tmp_path), "new.json")
    page = tmp_path / "compare.html"
    code, out, err = _run("report", "--compare", base, new, "--html", str(page))
    assert code == 0 and "accelkit compare: BASE" in out
    assert f"wrote the comparison's HTML page to {page}" in err
    assert page.read_text().startswith("<!DOCTYPE html>")
    code, out, err = _run("report", "--compare", base, new, "--json", "--html", str(page))
    assert code == 0 and json.loads(out)["new"] == new and str(page) in err


def test_the_cli_refuses_a_page_over_a_report_or_where_it_cannot_write(tmp_path) -> None:
    base = write(torch_run(), str(tmp_path), "base.json")
    new = write(torch_run(), str(tmp_path), "new.json")
    code, _, err = _run("report", "--compare", base, new, "--html", new)
    assert code == EXIT_USAGE and f"--html {new} is the run report {new}" in err
    assert json.loads(Path(new).read_text())["schema"]  # untouched
    target = tmp_path / "missing" / "compare.html"
    code, _, err = _run("report", "--compare", base, new, "--html", str(target))
    assert code == EXIT_USAGE and f"cannot write {target}" in err


def _chromium_page(tmp_path: Path) -> Path:
    base, new = torch_run(), torch_run(width=256, batch=64)
    new["losses"] = []  # a missing series on the page too
    page = tmp_path / "compare.html"
    page.write_text(_page(tmp_path, base, new))
    return page


def test_chromium_draws_both_runs(tmp_path: Path) -> None:
    from . import test_html_screenshot as screenshot

    width, height = 1000, 2600
    page, shot = _chromium_page(tmp_path), tmp_path / "compare.png"
    image = screenshot.screenshot(page, shot, width, height)
    colors = image.getcolors(maxcolors=width * height)
    assert colors is not None
    count = {rgb: n for n, rgb in colors}
    for role, color in zip(("BASE", "NEW"), COLORS, strict=False):  # BASE blue, NEW orange
        assert count.get(screenshot._rgb(color), 0) > 500, role


@pytest.mark.parametrize("width", [1280, 480])
def test_no_text_is_cut_off_at_a_desktop_s_width_or_a_phone_s(tmp_path: Path, width: int) -> None:
    from . import test_html_screenshot as screenshot

    chromium = screenshot._chromium()
    layout = screenshot._layout(chromium, _chromium_page(tmp_path), width)
    assert layout["scroll"] <= layout["width"], layout
    assert layout["past_the_window"] == [] and layout["scrolled"] == [], layout
    assert layout["outside_its_chart"] == [] and layout["legends_overlapping"] == 0, layout
