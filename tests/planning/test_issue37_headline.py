"""Issue 37: a plan's headline agrees with its choice. A what-if of several GPUs is
planned as the torchrun launch it advises (one process per GPU), so its distribution is
what runs under that launcher (DDP or FSDP2), as the memory choice says; a machine
detected here without a launcher is the one process it is, and is told to relaunch."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json

from hypothesis import given, settings
from hypothesis import strategies as st

import accelkit
from accelkit.cli import main
from accelkit.hardware.info import MAX_GPUS_PER_NODE
from accelkit.planning import Distribution, Request, plan

# the engine each sharding choice runs under a launcher
ENGINE = {"fsdp2": "fsdp", "ddp": "ddp"}


def _plan_json(*args: str) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["plan", *args, "--json"]) == 0
    return json.loads(out.getvalue())


def test_a_what_if_of_8_gpus_runs_ddp_under_torchrun() -> None:
    planned = accelkit.plan_for("H100 SXM", count=8)
    assert planned.distribution is Distribution.DDP
    launch = planned.get("launch")
    assert launch.value == "torchrun --nproc-per-node 8 your_script.py"
    assert "planned as launched by torchrun with 8 processes" in launch.reason
    assert "DistributedDataParallel" in launch.reason
    assert "without a launcher" in launch.reason and "one GPU" in launch.reason


def test_the_cli_header_of_8b_on_8_h100_says_fsdp_like_its_memory() -> None:
    document = _plan_json("--params", "8e9", "--gpu", "H100", "--count", "8")
    settings_by_key = {s["key"]: s for s in document["settings"]}
    assert document["memory"]["choice"] == "fsdp2"
    assert settings_by_key["sharding"]["value"] == "fsdp2"
    assert document["distribution"] == "fsdp"
    assert "FSDP2" in settings_by_key["launch"]["reason"]
    assert "torchrun" in settings_by_key["launch"]["value"]


def test_the_text_header_agrees_with_the_memory_line(capsys) -> None:
    assert main(["plan", "--params", "8e9", "--gpu", "H100", "--count", "8"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert "distribution fsdp " in head and "distribution none" not in head


def test_a_what_if_asked_for_ddp_is_planned_not_refused() -> None:
    assert accelkit.plan_for("H100 SXM", count=8, distribute="ddp").distribution.value == "ddp"


def test_a_detected_machine_without_a_launcher_keeps_advising_torchrun() -> None:
    detected = dataclasses.replace(accelkit.what_if("H100 SXM", 8), source="nvml")
    planned = plan(detected, Request(params=8e9))
    assert planned.distribution is Distribution.NONE
    launch = planned.get("launch")
    assert launch.value == "torchrun --nproc-per-node 8 your_script.py"
    assert "relaunch under torchrun" in launch.reason


def test_one_gpu_and_tensorflow_are_as_before() -> None:
    assert accelkit.plan_for("H100 SXM").distribution is Distribution.NONE
    assert accelkit.plan_for("H100 SXM").get("launch") is None
    tensorflow = accelkit.plan_for("H100 SXM", 8, framework="tensorflow")
    assert tensorflow.distribution is Distribution.MIRRORED


def test_a_what_if_past_one_server_sets_the_launched_nccl_variables() -> None:
    planned = accelkit.plan_for("L4", 40)
    assert planned.distribution is Distribution.DDP
    assert planned.value("NCCL_SOCKET_IFNAME") == "<fast interface>"
    assert "over 3 servers" in planned.get("launch").reason


@settings(max_examples=40, deadline=None)
@given(
    count=st.integers(2, MAX_GPUS_PER_NODE),
    params=st.integers(10**6, 10**12),
    gpu=st.sampled_from(["H100", "A100-SXM4-40GB", "L4", "H200"]),
)
def test_the_json_distribution_agrees_with_the_sharding(count: int, params: int, gpu: str) -> None:
    document = _plan_json("--params", str(params), "--gpu", gpu, "--count", str(count))
    keys = {s["key"]: s["value"] for s in document["settings"]}
    if "sharding" in keys:  # a refusal ("memory": does not fit) has no layout to agree with
        assert document["distribution"] == ENGINE[keys["sharding"]]
        assert document["distribution"] != "none"
        assert "torchrun" in keys["launch"]
