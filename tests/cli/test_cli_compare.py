"""`accelkit report --compare BASE.json NEW.json [--json] [--fail-if-slower PCT]` on real
CPU runs and on reports made from them: the table, the JSON document, and the exit code
a CI job reads (0 not slower beyond the noise and the percentage, 1 slower, 2 bad input)."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import tempfile
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("torch")

from accelkit.cli import EXIT_USAGE, main
from accelkit.profiling.run_report import RunReport

from ..report.compare_runs import scaled, steady, torch_run, write
from ..report.helpers import names_field, report_documents

FIGURES = ("step_time_s", "samples_per_second", "achieved_tflops", "input_wait_share")


def _run(*args: str, width: int = 100) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with (
        mock.patch.dict(os.environ, {"COLUMNS": str(width)}),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def folder():
    with tempfile.TemporaryDirectory() as name:
        yield name


def test_the_table_names_both_runs_and_fits_100_columns(folder) -> None:
    base = write(torch_run(), folder, "base.json")
    new = write(torch_run(width=256, batch=64), folder, "new.json")
    code, out, err = _run("report", "--compare", base, new)
    assert code == 0, err
    assert f"BASE {base}" in out and f"NEW  {new}" in out
    assert "step time" in out and "batch size" in out and "parameters" in out
    assert max(len(line) for line in out.splitlines()) <= 100, out
    code, narrow, _ = _run("report", "--compare", base, new, width=60)
    assert code == 0 and max(len(line) for line in narrow.splitlines()) <= 60, narrow


def test_json_is_one_document(folder) -> None:
    base = write(torch_run(), folder, "base.json")
    code, out, _ = _run("report", "--compare", base, base, "--json", "--fail-if-slower", "5%")
    assert code == 0
    document = json.loads(out)
    assert document["changes"] == [] and document["fail_if_slower"] == {
        "share": 0.05,
        "slower": False,
    }
    assert {f["verdict"] for f in document["figures"]} == {"within noise"}


@pytest.mark.parametrize("threshold", ["5%", "5", "5.0 %"])
def test_slower_beyond_noise_and_threshold_exits_1(folder, threshold) -> None:
    data = steady(torch_run(), 0.01)
    base, new = write(data, folder, "base.json"), write(scaled(data, 1.2), folder, "new.json")
    code, out, _ = _run("report", "--compare", base, new, "--fail-if-slower", threshold)
    assert code == 1
    assert "regression: NEW's step time is +20.0% against BASE" in out
    assert _run("report", "--compare", base, new, "--fail-if-slower", "25%")[0] == 0
    assert _run("report", "--compare", new, base, "--fail-if-slower", "0")[0] == 0  # faster
    assert _run("report", "--compare", base, new)[0] == 0  # no guard asked for


def test_slower_within_noise_exits_0(folder) -> None:
    data = steady(torch_run(), 0.3)
    base, new = write(data, folder, "base.json"), write(scaled(data, 1.2), folder, "new.json")
    code, out, _ = _run("report", "--compare", base, new, "--fail-if-slower", "1%")
    assert code == 0 and "no regression" in out and "within noise" in out


@pytest.mark.parametrize("text", ["five", "5%%", "-5", "%", "nan", "5 percent"])
def test_a_bad_percentage_exits_2_naming_the_valid_forms(folder, text) -> None:
    base = write(torch_run(), folder, "base.json")
    code, out, err = _run("report", "--compare", base, base, "--fail-if-slower", text)
    assert code == EXIT_USAGE and out == ""
    assert f"--fail-if-slower {text!r} is not a percentage" in err and "5% or 5" in err


def test_unreadable_and_invalid_files_exit_2_naming_file_and_field(folder) -> None:
    base = write(torch_run(), folder, "base.json")
    missing = os.path.join(folder, "missing.json")
    code, _, err = _run("report", "--compare", base, missing)
    assert code == EXIT_USAGE and "cannot read" in err and missing in err
    bad = write({**torch_run(), "step_time_s": "fast"}, folder, "bad.json")
    code, _, err = _run("report", "--compare", bad, base)
    assert code == EXIT_USAGE and bad in err and "'step_time_s'" in err
    other = write({"schema": "something/1"}, folder, "other.json")
    code, _, err = _run("report", "--compare", base, other)
    assert code == EXIT_USAGE and "is not an accelkit run report" in err


def test_a_guard_that_cannot_judge_exits_2(folder) -> None:
    data = torch_run()
    base = write(data, folder, "base.json")
    new = write({**data, "step_time_s": None}, folder, "new.json")
    code, _, err = _run("report", "--compare", base, new, "--fail-if-slower", "5")
    assert code == EXIT_USAGE and "not measured in NEW" in err
    assert _run("report", "--compare", base, new)[0] == 0  # the table shows what it can


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["run.json", "--compare", "a", "b"], "leave out RUN.json"),
        (["--compare", "a", "b", "--project", "H100"], "leave out --project"),
        (["run.json", "--fail-if-slower", "5"], "--fail-if-slower goes with --compare"),
        ([], "needs RUN.json, or --compare"),
    ],
)
def test_mixed_arguments_exit_2(args, says) -> None:
    code, _, err = _run("report", *args)
    assert code == EXIT_USAGE and says in err


def _within_noise(base: dict, new: dict) -> bool:
    """The noise rule of accelkit.report.comparison.figures, restated for step time."""
    b, n = base["step_time_s"], new["step_time_s"]
    if b == n:
        return True
    ranges = []
    for run, value in ((base, b), (new, n)):
        windows = [v for v in run["series"].get("step_time_s", []) if v is not None]
        ranges.append(
            (min(*windows, value), max(*windows, value)) if len(windows) > 1 else (value, value)
        )
    (b_low, b_high), (n_low, n_high) = ranges
    spreads = [
        max(value - low, high - value) / value
        for (low, high), value in zip(ranges, (b, n), strict=True)
    ]
    return (b_low <= n_high and n_low <= b_high) or abs(n / b - 1) <= max(spreads)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    base_spread=st.floats(0.0, 0.5),
    new_spread=st.floats(0.0, 0.5),
    factor=st.floats(0.5, 2.0),
    windows=st.integers(2, 6),
    threshold=st.floats(0.0, 50.0),
    unmeasured=st.sets(st.sampled_from(FIGURES[1:])),
)
def test_any_two_valid_reports_render_and_exit_by_the_rule(
    folder, base_spread, new_spread, factor, windows, threshold, unmeasured
) -> None:
    data = torch_run()
    base = steady(data, base_spread, windows)
    new = steady(scaled(data, factor), new_spread, windows)
    for name in unmeasured:  # a figure one run did not measure
        new[name] = None
    paths = write(base, folder, "base.json"), write(new, folder, "new.json")
    code, out, err = _run("report", "--compare", *paths, "--fail-if-slower", f"{threshold}%")
    slower = new["step_time_s"] / base["step_time_s"] - 1
    expected = 0 if _within_noise(base, new) or slower <= threshold / 100 else 1
    assert code == expected, (out, err)
    assert "step time" in out and max(len(line) for line in out.splitlines()) <= 100
    if _within_noise(base, new):
        assert code == 0  # never a regression inside the runs' own noise
    code, document, _ = _run(
        "report", "--compare", *paths, "--json", "--fail-if-slower", f"{threshold}"
    )
    assert code == expected and json.loads(document)["fail_if_slower"]["slower"] == (expected == 1)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    field=st.sampled_from(
        ["step_time_s", "samples_per_second", "steps", "framework", "series", "versions", "advice"]
    ),
    value=st.sampled_from(["x", [1, "a"], {"a": "b"}, True, [None]]),
    side=st.sampled_from(["BASE", "NEW"]),
)
def test_invalid_reports_exit_2_naming_the_field(folder, field, value, side) -> None:
    bad = copy.deepcopy(torch_run())
    bad[field] = value
    if _valid(bad):
        return  # this value fits the field: not an invalid report
    good, broken = write(torch_run(), folder, "good.json"), write(bad, folder, "broken.json")
    paths = (broken, good) if side == "BASE" else (good, broken)
    code, out, err = _run("report", "--compare", *paths, "--fail-if-slower", "5")
    assert code == EXIT_USAGE and out == ""
    assert broken in err and names_field(err, field), err


def _valid(document: dict) -> bool:
    try:
        RunReport.from_dict(document)
    except ValueError:
        return False
    return True


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(base=report_documents(), new=report_documents())
def test_any_two_schema_drawn_reports_render_or_exit_2(folder, base, new) -> None:
    paths = write(base, folder, "base.json"), write(new, folder, "new.json")
    valid = _valid(base) and _valid(new)
    code, out, err = _run("report", "--compare", *paths)
    if not valid:
        assert code == EXIT_USAGE and out == "" and any(p in err for p in paths), err
        return
    assert code == 0, err
    assert max(len(line) for line in out.splitlines()) <= 100, out
    code, out, err = _run("report", "--compare", *paths, "--json", "--fail-if-slower", "5%")
    judged = None not in (base.get("step_time_s"), new.get("step_time_s"))
    assert code in ((0, 1) if judged else (EXIT_USAGE,)), err
    if code != EXIT_USAGE:
        document = json.loads(out)
        step = next(f for f in document["figures"] if f["name"] == "step_time_s")
        assert (code == 1) == (step["verdict"] == "slower" and step["change"] > 0.05)
