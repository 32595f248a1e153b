"""`accelkit plan` and float8: tried by tune on an H200, off with the reason on an A100,
on under --precision fp8, and --precision fp8 refused below 8.9 with the numbers."""

from __future__ import annotations

import json

import pytest

from accelkit.cli import main


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["plan", *args])
    out, err = capsys.readouterr()
    return code, out, err


def float8_setting(capsys: pytest.CaptureFixture[str], *args: str) -> dict | None:
    code, out, _ = run(capsys, *args, "--json")
    assert code == 0
    return next((s for s in json.loads(out)["settings"] if s["key"] == "float8"), None)


def test_an_h200_plan_says_tune_tries_float8(capsys) -> None:
    setting = float8_setting(capsys, "--gpu", "H200")
    assert setting is not None and setting["value"] == "tried by tune"
    assert setting["framework"] == "torch" and "torchao" in setting["reason"]
    code, out, _ = run(capsys, "--gpu", "H200")
    assert code == 0 and "float8" in out and "tried by tune" in out


def test_an_a100_plan_says_why_float8_is_off(capsys) -> None:
    setting = float8_setting(capsys, "--gpu", "A100")
    assert setting is not None and setting["value"] == "off"
    assert "compute capability 8.0" in setting["reason"]
    assert "8.9" in setting["reason"] and "Hopper" in setting["reason"]
    code, out, _ = run(capsys, "--gpu", "A100")
    assert code == 0 and "float8" in out and "no float8 matmuls" in out


def test_precision_fp8_turns_float8_on(capsys) -> None:
    code, out, _ = run(capsys, "--gpu", "H100", "--precision", "fp8", "--json")
    assert code == 0
    document = json.loads(out)
    settings = {s["key"]: s["value"] for s in document["settings"]}
    assert document["precision"] == "fp8"
    assert settings["float8"] == "on" and settings["autocast.dtype"] == "bfloat16"


def test_precision_fp8_on_a_t4_is_refused_with_the_numbers(capsys) -> None:
    code, out, err = run(capsys, "--gpu", "T4", "--precision", "fp8")
    assert code != 0 and out == ""
    assert "precision='fp8' needs compute capability >= 8.9" in err and "7.5" in err


def test_tensorflow_plans_have_no_float8_row(capsys) -> None:
    assert float8_setting(capsys, "--gpu", "H200", "--framework", "tensorflow") is None
