"""`accelkit report FILE` and `bench --single-device FILE` on files that are not good
reports: exit 2 with the file and the field named, never a traceback."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import subprocess
import sys
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelkit.cli import EXIT_USAGE, main
from accelkit.profiling.run_report import RunReport

from ..report.helpers import json_values, names_field, saved_report

SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")
FIELDS = [f.name for f in dataclasses.fields(RunReport) if f.name != "trained_model"]


def _run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def _write(document) -> str:
    handle, path = tempfile.mkstemp(suffix=".json")
    with os.fdopen(handle, "w") as out:
        json.dump(document, out)
    return path


def _refused(value) -> bool:
    try:
        RunReport.from_dict({**saved_report(), **value})
    except ValueError:
        return True
    return False


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(field=st.sampled_from(FIELDS), value=json_values)
def test_a_field_of_the_wrong_type_exits_2_naming_file_and_field(field, value) -> None:
    path = _write({**saved_report(), field: value})
    try:
        code, _, err = _run("report", path)
    finally:
        os.unlink(path)
    if _refused({field: value}):
        assert code == EXIT_USAGE
        assert path in err and names_field(err, field), err
    else:
        assert code == 0, err


@settings(max_examples=60, deadline=None)
@given(document=json_values)
def test_a_file_holding_no_report_object_exits_2_naming_the_file(document) -> None:
    path = _write(document)
    try:
        code, out, err = _run("report", path)
    finally:
        os.unlink(path)
    assert code == EXIT_USAGE and path in err and "not an accelkit run report" in err
    assert out == ""


@pytest.mark.parametrize("field", ["framework", "model", "device", "precision", "matmul_dtype"])
def test_a_report_missing_a_required_field_exits_2_naming_it(field) -> None:
    document = saved_report()
    del document[field]
    path = _write(document)
    try:
        code, _, err = _run("report", path)
    finally:
        os.unlink(path)
    assert code == EXIT_USAGE and path in err and f"missing required field '{field}'" in err


def test_a_string_figure_is_named_not_a_format_error() -> None:
    path = _write({**saved_report(), "samples_per_second": "12.5"})
    try:
        done = subprocess.run(
            [sys.executable, "-m", "accelkit", "report", path],
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": SRC},
        )
    finally:
        os.unlink(path)
    assert done.returncode == EXIT_USAGE, done.stderr
    assert "Traceback" not in done.stderr and "Unknown format code" not in done.stderr
    assert f"{path}: field 'samples_per_second' must be a number or null" in done.stderr


@pytest.mark.parametrize("document", [[1, 2], "a report", {**saved_report(), "world_size": "1"}])
def test_bench_single_device_checks_its_file_before_the_run(document) -> None:
    path = _write(document)
    try:
        code, out, err = _run("bench", "--single-device", path)
    finally:
        os.unlink(path)
    assert code == EXIT_USAGE and path in err and out == ""
    if isinstance(document, dict):
        assert "field 'world_size' must be a whole number" in err


def test_an_mfu_without_its_peak_is_named_not_a_traceback() -> None:
    path = _write({**saved_report(), "mfu": 0.5, "peak_tflops": None})
    try:
        code, _, err = _run("report", path)
    finally:
        os.unlink(path)
    assert code == EXIT_USAGE and f"{path}: field 'mfu' is 0.5 but 'peak_tflops' is null" in err


@pytest.mark.parametrize("depth", [2_000, 100_000])
def test_a_deeply_nested_file_exits_2_naming_it(depth) -> None:
    """Issue 25 D14: json's decoder recurses; too deep a document is a bad file, no traceback."""
    handle, path = tempfile.mkstemp(suffix=".json")
    with os.fdopen(handle, "w") as out:
        out.write("[" * depth + "]" * depth)
    try:
        code, out, err = _run("report", path)
    finally:
        os.unlink(path)
    assert code == EXIT_USAGE and out == ""
    assert f"{path} is not a run report: its JSON is nested too deeply" in err


# Text with the characters a terminal acts on: ESC and CSI sequences, BEL, CR, backspace.
hostile = st.lists(
    st.sampled_from(["\x1b", "\x9b", "\x07", "\r", "\b", "\x00", "\x7f", "]0;", "[2J", "a", " "]),
    min_size=1,
    max_size=12,
).map("".join)


@settings(max_examples=60, deadline=None)
@given(model=hostile, device=hostile, note=hostile, reason=hostile)
def test_report_prints_no_control_character_from_the_file(model, device, note, reason) -> None:
    """Issue 25 D19: strings from a report file reach the terminal escaped."""
    path = _write({**saved_report(), "model": model, "device": device, "notes": {note: reason}})
    try:
        code, out, err = _run("report", path)
    finally:
        os.unlink(path)
    assert code == 0, err
    assert not [c for c in out if c != "\n" and (ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F)]
    assert "\\x1b" in out or "\x1b" not in model + device + note + reason
