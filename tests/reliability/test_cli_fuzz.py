"""Bad input to the `accelkit` command: whatever the arguments, it answers with an exit
code and a line, never a traceback.

Exit codes (docs/cli): 0 done, 1 unknown GPU, 2 bad usage (argparse's own, or a value
accelkit refuses). `plan` and `specs` run without a framework, so thousands of
arguments are cheap to try.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelkit.cli import main

GPUS = [
    "NVIDIA H200",
    "H100",
    "a100",
    "L4",
    "rtx 4090",
    "T4",
    "",
    " ",
    "h20",
    "NVIDIA",
    "x" * 300,
    "A100-SXM4-80GB",
    "tesla",
    "\x00",
    "é",
]
COUNTS = st.one_of(
    st.integers(-3, 20).map(str), st.sampled_from(["", "1.5", "nan", "1e3", "99999999999"])
)
FRAMEWORKS = st.sampled_from(["torch", "tensorflow", "jax", "", "TORCH"])
PRECISIONS = st.sampled_from(["auto", "bf16", "fp16", "tf32", "fp32", "fp8", "", "BF16"])


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse: usage errors and --help
        code = int(exit_.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    gpu=st.one_of(st.sampled_from(GPUS), st.text(max_size=20)),
    count=COUNTS,
    framework=FRAMEWORKS,
    precision=PRECISIONS,
    as_json=st.booleans(),
)
def test_plan_answers_any_arguments_with_an_exit_code(
    capsys: pytest.CaptureFixture[str],
    gpu: str,
    count: str,
    framework: str,
    precision: str,
    as_json: bool,
) -> None:
    argv = [
        "plan",
        "--gpu",
        gpu,
        "--count",
        count,
        "--framework",
        framework,
        "--precision",
        precision,
    ] + (["--json"] if as_json else [])
    code, out, err = _run(argv, capsys)
    assert code in (0, 1, 2), (argv, code, err)
    assert "Traceback" not in err
    if code == 0 and as_json:
        document = json.loads(out)  # one JSON document, nothing else on stdout
        assert {"precision", "settings", "distribution", "env", "hardware"} <= set(document)
    if code:
        assert err.strip() and not out.strip()  # a message, on stderr only


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(gpu=st.one_of(st.sampled_from(GPUS), st.text(max_size=12)), as_json=st.booleans())
def test_specs_answers_any_gpu_name_with_an_exit_code(
    capsys: pytest.CaptureFixture[str], gpu: str, as_json: bool
) -> None:
    code, out, err = _run(["specs", "--gpu", gpu] + (["--json"] if as_json else []), capsys)
    assert code in (0, 1, 2) and "Traceback" not in err
    if code == 0 and as_json:
        json.loads(out)


REPORT_VALUES = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=5)
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    document=st.one_of(
        REPORT_VALUES,
        st.dictionaries(
            st.sampled_from(
                [
                    "schema",
                    "framework",
                    "samples_per_second",
                    "interrupted",
                    "advice",
                    "steps",
                    "mfu",
                    "notes",
                    "tuning",
                    "losses",
                    "world_size",
                ]
            ),
            REPORT_VALUES,
            max_size=6,
        ),
    )
)
def test_report_answers_any_json_file_with_an_exit_code(
    capsys: pytest.CaptureFixture[str], tmp_path_factory: Any, document: Any
) -> None:
    path = tmp_path_factory.mktemp("report") / "run.json"
    path.write_text(json.dumps(document))
    code, _, err = _run(["report", str(path)], capsys)
    assert code in (0, 2), (document, code, err)
    assert "Traceback" not in err
    if code:
        assert str(path) in err  # names the file
