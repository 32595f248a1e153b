"""`accelkit bench` and `accelkit report`, in a subprocess, on real PyTorch."""

from __future__ import annotations

import json

import pytest

from ..helpers.cli import accelkit as run_accelkit

pytestmark = pytest.mark.torch


accelkit = run_accelkit


def test_bench_gpt_json_and_saved_report(tmp_path) -> None:
    path = tmp_path / "run.json"
    done = accelkit(
        "bench",
        "--model",
        "gpt",
        "--framework",
        "torch",
        "--steps",
        "8",
        "--batch-size",
        "2",
        "--calibrate",
        "--json",
        "--save",
        str(path),
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["model"] == "GPT" and document["steps"] == 8
    assert document["tokens_per_second"] == pytest.approx(document["samples_per_second"] * 256)
    # The counted FLOPs agree with the independent 6N + 12LTd count.
    assert "ratio 1.0000" in document["notes"]["flops_per_step"]
    assert document["mfu_calibrated"] > 0
    assert json.loads(path.read_text()) == document

    rendered = accelkit("report", str(path))
    assert rendered.returncode == 0, rendered.stderr
    assert "accelkit run: torch, GPT" in rendered.stdout and "tokens/s" in rendered.stdout


def test_bench_unknown_model_is_a_usage_error() -> None:
    done = accelkit("bench", "--model", "alexnet", "--framework", "torch")
    assert done.returncode == 2 and "gpt" in done.stderr


def test_report_of_a_file_that_is_not_a_report(tmp_path) -> None:
    path = tmp_path / "other.json"
    path.write_text('{"hello": 1}')
    done = accelkit("report", str(path))
    assert done.returncode == 2 and "not an accelkit run report" in done.stderr


def test_bench_save_to_a_missing_folder_fails_before_the_run(tmp_path, capsys) -> None:
    from accelkit.cli import main

    missing = tmp_path / "no" / "such" / "dir" / "run.json"
    assert (
        main(
            [
                "bench",
                "--model",
                "mlp",
                "--framework",
                "torch",
                "--steps",
                "4",
                "--save",
                str(missing),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "does not exist" in err and str(missing.parent) in err
    assert not missing.parent.exists()
