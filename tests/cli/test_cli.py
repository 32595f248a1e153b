"""The `accelkit` command, run as users run it: in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ..helpers.cli import accelkit as run_accelkit

SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")


def accelkit(*args: str) -> subprocess.CompletedProcess[str]:
    return run_accelkit(*args, timeout=120)


def test_plan_json_for_a_t4_under_tensorflow() -> None:
    done = accelkit(
        "plan", "--gpu", "Tesla T4", "--count", "2", "--framework", "tensorflow", "--json"
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)  # one document, nothing else on stdout
    assert document["precision"] == "fp16"
    assert document["distribution"] == "mirrored"
    assert document["env"]["TF_GPU_THREAD_MODE"] == "gpu_private"
    assert len(document["hardware"]["gpus"]) == 2
    keys = {s["key"]: s for s in document["settings"]}
    assert keys["keras.mixed_precision.global_policy"]["value"] == "mixed_float16"
    for setting in document["settings"]:
        assert {"key", "value", "framework", "reason"} <= set(setting)
        assert setting["reason"]


def test_plan_table_for_an_h200_node() -> None:
    done = accelkit("plan", "--gpu", "NVIDIA H200", "--count", "8")
    assert done.returncode == 0, done.stderr
    assert "precision bf16" in done.stdout
    assert "torchrun --nproc-per-node 8" in done.stdout


def test_plan_for_this_machine() -> None:
    done = accelkit("plan", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["framework"] == "torch"


def test_unknown_gpu_exits_1_and_suggests_names() -> None:
    done = accelkit("plan", "--gpu", "NVIDIA H2000")
    assert done.returncode == 1
    assert done.stdout == ""
    assert "H200" in done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("plan", "--precision", "half"),
        ("plan", "--count", "0"),
        ("plan", "--framework", "jax"),
        ("frobnicate",),
    ],
)
def test_bad_arguments_exit_2_naming_valid_values(args: tuple[str, ...]) -> None:
    done = accelkit(*args)
    assert done.returncode == 2
    assert "usage" in done.stderr or "valid" in done.stderr


def test_bf16_on_a_t4_is_a_usage_error_with_the_numbers() -> None:
    done = accelkit("plan", "--gpu", "Tesla T4", "--precision", "bf16")
    assert done.returncode == 2
    assert "7.5" in done.stderr and "8.0" in done.stderr


def test_specs_json_has_dense_peaks_memory_and_bandwidth() -> None:
    done = accelkit("specs", "--gpu", "NVIDIA A100-SXM4-80GB", "--json")
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)
    assert row["peak_tflops"]["bf16"] == pytest.approx(312)
    assert row["peak_tflops"]["tf32"] == pytest.approx(156)
    assert row["memory_gb"] == pytest.approx(80)
    assert row["bandwidth_gbps"] > 1900
    assert row["source"]


def test_specs_table_lists_every_row() -> None:
    table = accelkit("specs")
    document = json.loads(accelkit("specs", "--json").stdout)
    assert table.returncode == 0
    for row in document["gpus"]:  # the short table says "NVIDIA" once, in its title
        assert row["name"].removeprefix("NVIDIA ") in table.stdout


def test_specs_unknown_gpu_exits_1() -> None:
    near = accelkit("specs", "--gpu", "RTX 4095")
    assert near.returncode == 1 and "4090" in near.stderr
    far = accelkit("specs", "--gpu", "Voodoo 5")
    assert far.returncode == 1 and "accelkit specs" in far.stderr


def test_doctor_json_on_this_machine() -> None:
    done = accelkit("doctor", "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert {"accelkit", "python", "frameworks", "hardware", "plan"} <= set(document)
    assert document["plan"]["precision"] in {"bf16", "fp16", "tf32", "fp32"}
    assert all(s["status"] == "planned" for s in document["plan"]["settings"])


def test_doctor_table() -> None:
    done = accelkit("doctor")
    assert done.returncode == 0, done.stderr
    assert "GPUs:" in done.stdout and "accelkit plan:" in done.stdout


def test_version() -> None:
    from accelkit import __version__

    done = accelkit("--version")
    assert done.returncode == 0 and __version__ in done.stdout


def test_an_empty_gpu_name_is_an_error_not_this_machine(capsys) -> None:
    from accelkit.cli import main

    assert main(["plan", "--gpu", " "]) == 2
    assert "--gpu names no GPU" in capsys.readouterr().err


def test_a_huge_unknown_name_is_not_echoed_back_whole(capsys) -> None:
    from accelkit.cli import main

    assert main(["specs", "--gpu", "X" * 100_000]) == 1
    assert len(capsys.readouterr().err) < 2000


def test_a_closed_pipe_is_not_a_traceback() -> None:
    done = subprocess.run(  # noqa: S602 - a shell pipe into head is what this tests
        f"{sys.executable} -m accelkit specs --json | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONPATH": SRC},
    )
    assert done.stdout.strip() and "Traceback" not in done.stderr, done.stderr


def test_auto_configure_refuses_hardware_that_is_not_a_snapshot() -> None:
    import accelkit

    with pytest.raises(ValueError, match="hardware='garbage' is not valid"):
        accelkit.auto_configure(hardware="garbage", verbose=False)
