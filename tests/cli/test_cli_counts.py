"""GPU counts on the command line: bounded by what exists, exit 2 naming the range,
never a command that does not return."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelkit.cli import EXIT_USAGE, main
from accelkit.hardware.what_if import MAX_GPUS
from accelkit.profiling.run_report import RunReport


def _run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exit_:  # argparse's usage errors
            code = int(exit_.code or 0)
    return code, out.getvalue(), err.getvalue()


@settings(max_examples=80, deadline=None)
@given(count=st.one_of(st.integers(-5, 10**13), st.sampled_from(["1e3", "x", "", "8.0"])))
def test_plan_count_is_what_plan_for_takes_or_exit_2_naming_the_range(count) -> None:
    code, out, err = _run("plan", "--gpu", "L4", "--count", str(count), "--json")
    if isinstance(count, int) and 1 <= count <= MAX_GPUS:
        assert code == 0 and len(json.loads(out)["hardware"]["gpus"]) == count
    else:
        assert code == EXIT_USAGE and out == ""
        assert f"from 1 to {MAX_GPUS:,}" in err


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("run") / "run.json"
    RunReport(
        framework="torch",
        model="m",
        device="cpu",
        precision="fp32",
        matmul_dtype="fp32",
        flops_per_step=1e12,
        batch_size=32,
        steps=10,
        step_time_s=0.1,
    ).save(path)
    return str(path)


@settings(max_examples=40, deadline=None)
@given(count=st.one_of(st.integers(MAX_GPUS + 1, 10**13), st.integers(-5, 0)))
def test_project_count_past_the_bound_exits_2_naming_the_range(saved, count) -> None:
    code, out, err = _run("report", saved, "--project", f"L4:{count}")
    assert code == EXIT_USAGE and out == ""
    assert f"from 1 to {MAX_GPUS:,}" in err and f"L4:{count}" in err


def test_project_count_at_the_bound_answers(saved) -> None:
    code, out, err = _run("report", saved, "--project", f"L4:{MAX_GPUS}", "--json")
    assert code == 0, err
    assert json.loads(out)["projections"][0]["count"] == MAX_GPUS
