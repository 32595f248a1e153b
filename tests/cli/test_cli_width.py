"""The `accelkit` tables fit the terminal: whatever the width (``COLUMNS``, 40 to 300),
no line is wider, except a word longer than any line (a URL), which stands whole on its
own; no reason or note loses a word; `--json` does not change with the width; `doctor`
says each note once."""

from __future__ import annotations

import contextlib
import io
import json
import os
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelkit import specs
from accelkit.advisor.projection import project
from accelkit.cli import main
from accelkit.configure import plan_for
from accelkit.profiling.run_report import RunReport
from accelkit.profiling.tuning import Trial, TuneResult
from accelkit.report.assemble import with_advice
from accelkit.report.render import render_projections, render_run

from ..report.helpers import saved_report
from ..report.test_assemble import _input_bound
from ..report.test_html import _report

widths = st.integers(40, 300)
GPUS = [spec.name for spec in specs.all_specs()]  # full names: a key may match two rows
# Rows `project` takes: it plans through the row's key (a key that names two rows, gh200,
# is refused) and needs the bf16 peak (not every datasheet gives one).
PROJECTABLE = [
    spec.name
    for spec in specs.all_specs()
    if specs.lookup(spec.key) == spec and spec.peak("bf16") is not None
]


def _stdout(argv: list[str], width: int) -> str:
    out = io.StringIO()
    with mock.patch.dict(os.environ, {"COLUMNS": str(width)}), contextlib.redirect_stdout(out):
        assert main(argv) == 0
    return out.getvalue()


def fits(text: str, width: int) -> bool:
    """No line wider than `width`, but one word too long for the line it wraps into (its
    indent, at most 10 columns, taken), alone on its own line."""
    return all(
        len(line) <= width or (len(line.split()) == 1 and len(line.strip()) > width - 10)
        for line in text.splitlines()
    )


def said(part: str, text: str) -> bool:
    """Every word of `part` is in `text` whole, and in its order."""
    return set(part.split()) <= set(text.split()) and "".join(part.split()) in "".join(text.split())


def _tuned() -> RunReport:
    trials = (
        Trial("eager", {"compile": False}, "baseline", 0.02, [0.019, 0.021], 10),
        Trial("compile", {"compile": True}, "chosen", 0.01, [0.0099, 0.011], 10, 12.5, "faster"),
    )
    tuning = TuneResult("tuned", trials, False, "compile", 2.0, 20).to_dict()
    return RunReport.from_dict({**saved_report(), "tuning": tuning})


REPORTS = [
    RunReport.from_dict(saved_report()),
    with_advice(_input_bound()),
    _report(),
    _tuned(),
]


@settings(max_examples=60, deadline=None)
@given(
    gpu=st.sampled_from(GPUS),
    count=st.integers(1, 8),
    framework=st.sampled_from(["torch", "tensorflow"]),
    width=widths,
)
def test_a_plan_table_fits_any_width_and_keeps_every_reason(gpu, count, framework, width) -> None:
    text = _stdout(["plan", "--gpu", gpu, "--count", str(count), "--framework", framework], width)
    assert fits(text, width), text
    plan = plan_for(gpu, count, framework=framework)
    for setting in plan.settings:
        assert said(setting.reason, text), setting.reason
    for note in plan.notes:
        assert said(note, text), note


@settings(max_examples=40, deadline=None)
@given(report=st.sampled_from(REPORTS), width=widths)
def test_a_run_report_fits_any_width_and_keeps_its_notes_and_advice(report, width) -> None:
    text = render_run(report, width)
    assert fits(text, width), text
    for key, note in report.notes.items():
        assert said(f"{key}: {note}", text)
    for advice in report.advice:
        assert said(advice.get("title", ""), text)
        assert said(str(advice.get("action") or ""), text)


@settings(max_examples=20, deadline=None)
@given(width=widths, targets=st.lists(st.sampled_from(PROJECTABLE), min_size=1, max_size=4))
def test_projections_fit_any_width(width, targets) -> None:
    measured = {"flops_per_step": 1e12, "step_time_s": 0.05, "steady_steps": 4}
    report = RunReport.from_dict({**saved_report(), **measured, "facts": {"parameters": 1e8}})
    keys = [specs.lookup(name).key for name in targets]
    text = render_projections([project(report, key, 8, 2.5) for key in keys], width)
    assert fits(text, width), text


@settings(max_examples=10, deadline=None)
@given(width=widths)
def test_the_specs_table_fits_any_width_and_keeps_every_source(width) -> None:
    text = _stdout(["specs", "--long"], width)  # the blocks with sources (issue 39)
    assert fits(text, width)
    assert all(said(spec.source, text) for spec in specs.all_specs())


@pytest.mark.parametrize("argv", [["plan", "--gpu", "H200", "--count", "8"], ["specs"]])
def test_wide_output_used_to_be_wider_than_the_terminal(argv) -> None:
    # The regression: 313 and 498 columns at any terminal width before.
    assert max(len(line) for line in _stdout(argv, 100).splitlines()) <= 100 + 50


@pytest.mark.parametrize(
    "argv", [["plan", "--gpu", "H200", "--count", "8", "--json"], ["specs", "--json"]]
)
def test_json_does_not_depend_on_the_width(argv) -> None:
    assert json.loads(_stdout(argv, 40)) == json.loads(_stdout(argv, 300))


@settings(max_examples=5, deadline=None)
@given(width=widths)
def test_doctor_says_each_note_once(width) -> None:
    document = json.loads(_stdout(["doctor", "--json"], width))
    text = _stdout(["doctor"], width)
    assert fits(text, width), text
    notes = document["hardware"]["notes"] + document["plan"]["notes"]
    assert notes  # at least the dry run's
    flat = " ".join(text.split())
    for note in notes:
        assert flat.count(" ".join(note.split())) == 1, note
