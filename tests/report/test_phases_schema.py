"""A report's phases in its file: the schema takes them, a report saved before them still
loads and renders, and whatever numbers a file holds there, the text and the page draw."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelkit.profiling.run_report import RunReport
from accelkit.report.html import render_html
from accelkit.report.phases import run_time
from accelkit.report.render import render_run

from .helpers import saved_report

PHASES = {
    "run_seconds": 120.0,
    "training_seconds": 80.1,
    "evaluation_seconds": 30.2,
    "other_seconds": 9.7,
    "evaluation_share": 30.2 / 120.0,
    "eval_losses": [0.7, 0.6],
}
OLD_FIELDS = [*PHASES]  # what a report saved before the phases lacks


def test_a_report_with_its_phases_saves_loads_back_equal_and_draws_them(tmp_path) -> None:
    report = RunReport.from_dict({**saved_report(), **PHASES})
    report.save(tmp_path / "run.json")
    loaded = RunReport.load(tmp_path / "run.json")
    assert loaded == report
    assert "120.0 s = training 80.1 s (67%)" in render_run(loaded, 120)
    assert 'id="chart-phases" class="chart"' in render_html(loaded)


def test_a_report_file_from_before_the_phases_loads_and_renders(tmp_path) -> None:
    data = {**saved_report(), "facts": {"run_seconds": 120.0}}
    for field in OLD_FIELDS:
        data.pop(field, None)
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    report = RunReport.load(path)
    assert report.run_seconds is None and report.evaluation_share is None
    text = render_run(report, 100)
    assert "samples/s" in text and "training" not in text
    page = render_html(report)
    assert "No chart: the run&#x27;s phases were not recorded" in page


@pytest.mark.parametrize("field", [f for f in PHASES if f != "eval_losses"])
def test_a_phase_that_is_not_a_number_is_refused_naming_it(field) -> None:
    with pytest.raises(ValueError, match=f"field '{field}' must be a number or null"):
        RunReport.from_dict({**saved_report(), field: "long"})


numbers = st.none() | st.floats(-1e12, 1e12, allow_nan=False) | st.integers(-(10**9), 10**9)


@settings(max_examples=150, deadline=None)
@given(values=st.fixed_dictionaries({f: numbers for f in PHASES if f != "eval_losses"}))
def test_any_numbers_the_file_holds_for_the_phases_draw(values) -> None:
    share = values["evaluation_share"]
    if share is not None and not 0 <= share <= 1:  # a share outside 0..1: refused by name
        with pytest.raises(ValueError, match="field 'evaluation_share' is"):
            RunReport.from_dict({**saved_report(), **values})
        return
    report = RunReport.from_dict({**saved_report(), **values})
    text, page = render_run(report, 80), render_html(report)
    assert "chart-phases" in page
    time = run_time(report)
    assert bool(re.search(r"^time\b", text, re.MULTILINE)) == (time is not None)
    assert all(0 <= p.share <= 1 for p in (time.phases if time else ()) if p.share is not None)
