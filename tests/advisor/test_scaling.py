"""The scaling rule on plain data: efficiency, the slow rank, the topology in the evidence."""

from __future__ import annotations

import dataclasses

import pytest

from accelkit import what_if
from accelkit.advisor import Severity, advise
from accelkit.advisor.context import Context
from accelkit.advisor.rules import RULES, scaling
from accelkit.hardware.info import HardwareInfo

from .helpers import ids, measured_on

H100x2 = what_if("H100 SXM", 2)
RTX4090x2 = what_if("RTX 4090", 2)
TWO_NODES = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8"}


def ranks(*rows):
    """Per-rank figures as `accelkit.profiling.world.rank_figures` gives them."""
    return [
        {
            "rank": i,
            "devices": 1,
            "steady_samples": 100 * 32,
            "steady_seconds": step * 100,
            "steady_steps": 100,
            "samples_per_second": 32 / step,
            "step_time_s": step,
            "input_wait_share": wait,
        }
        for i, (step, wait) in enumerate(rows)
    ]


def run(
    hardware=H100x2,
    efficiency=0.6,
    world=2,
    single=1000.0,
    slowest=1,
    per_rank=((0.030, 0.01), (0.032, 0.01)),
    **figures,
):
    return measured_on(
        hardware,
        world_size=world,
        scaling_efficiency=efficiency,
        single_device_samples_per_second=single,
        global_samples_per_second=(None if efficiency is None else efficiency * world * single),
        slowest_rank=slowest,
        ranks=ranks(*per_rank),
        facts=figures.pop("facts", {"batch_size": 32}),
        **figures,
    )


def rule(hardware=H100x2, **kwargs):
    return scaling.scaling(Context.build(hardware, None, run(hardware, **kwargs)))


@pytest.mark.parametrize(
    ("efficiency", "severity"),
    [
        (0.60, Severity.WARNING),
        (0.7499, Severity.WARNING),
        (0.75, Severity.INFO),
        (0.85, Severity.INFO),
    ],
)
def test_fires_below_ninety_percent_with_the_upper_bound_gain(efficiency, severity) -> None:
    found = rule(efficiency=efficiency)
    assert found.id == "scaling" and found.severity is severity
    assert found.speedup == pytest.approx(1 / efficiency)
    assert f"1 / {efficiency:.3f}" in found.expected_gain and "upper bound" in found.expected_gain
    assert found.evidence["scaling_efficiency"] == pytest.approx(efficiency, abs=1e-4)
    assert found.evidence["single_device_samples_per_second"] == 1000.0
    assert found.evidence["ideal_samples_per_second"] == 2000.0
    assert found.evidence["global_samples_per_second"] == pytest.approx(2000.0 * efficiency)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"efficiency": 0.9},
        {"efficiency": 0.97},
        {"efficiency": None},
        {"efficiency": 0.5, "world": 1},
    ],
)
def test_quiet_when_scaling_is_good_unknown_or_on_one_device(kwargs) -> None:
    assert rule(**kwargs) is None


def test_quiet_on_a_report_without_world_figures() -> None:
    assert scaling.scaling(Context.build(None, None, {"samples_per_second": 10.0})) is None


def test_communication_bound_run_gets_torch_ddp_actions_and_nvlink_topology() -> None:
    found = rule(efficiency=0.6)
    assert "rank" not in found.title  # the slowest rank's input wait is like the others'
    assert found.evidence["slowest_rank"] == 1
    assert found.evidence["slowest_step_ms"] == 32.0 and found.evidence["fastest_step_ms"] == 30.0
    assert found.evidence["interconnect"] == "NVLink" and found.evidence["nodes"] == 1
    assert found.evidence["gpus_per_node"] == 2
    for text in (
        "per-device batch of 64",
        "accumulation_steps=",
        "no_sync()",
        "bucket_cap_mb=",
        "gradient_as_bucket_view=True",
        "NVLink",
    ):
        assert text in found.action
    assert "NCCL_P2P_DISABLE unset" in found.action


def test_a_rank_starved_of_input_is_named_first() -> None:
    found = rule(efficiency=0.7, per_rank=((0.030, 0.02), (0.045, 0.30)))
    assert "rank 1 waits longer for input" in found.title
    assert found.action.startswith("rank 1 waits longer for input")
    assert found.evidence["slowest_rank_input_wait_share"] == 0.3
    assert found.evidence["other_ranks_input_wait_share"] == 0.02


def test_gpus_without_peer_to_peer_say_so() -> None:
    found = rule(RTX4090x2, efficiency=0.7)
    assert found.evidence["interconnect"] == "PCIe without peer-to-peer (through host memory)"
    assert "no peer-to-peer path" in found.action


def test_bridged_pairs_are_not_called_an_nvlink_machine() -> None:
    """8 x A100 PCIe are four NVLink-bridged pairs over PCIe (before: "NVLink", and the
    action's "NVLink joins these GPUs"); 8 x A100 SXM are one NVLink board."""
    eight = [(0.030, 0.01)] * 8
    bridged = rule(what_if("A100 PCIe", 8), efficiency=0.6, world=8, per_rank=eight)
    assert bridged.evidence["interconnect"] == "NVLink between some pairs, PCIe between others"
    assert "NVLink joins these GPUs" not in bridged.action
    board = rule(what_if("A100-SXM4-80GB", 8), efficiency=0.6, world=8, per_rank=eight)
    assert board.evidence["interconnect"] == "NVLink"
    assert "NVLink joins these GPUs" in board.action


def test_two_nodes_without_infiniband_get_socket_advice() -> None:
    hardware = what_if("H100 SXM", 8, environ=TWO_NODES)
    found = rule(hardware, efficiency=0.5, world=16)
    assert found.evidence["nodes"] == 2 and found.evidence["infiniband"] is False
    assert "NCCL_SOCKET_IFNAME" in found.action


def test_two_nodes_with_infiniband_point_at_nccl_ib() -> None:
    hardware = dataclasses.replace(what_if("H100 SXM", 8, environ=TWO_NODES), infiniband=True)
    found = rule(hardware, efficiency=0.5, world=16)
    assert found.evidence["infiniband"] is True
    assert "NET/IB" in found.action and "NCCL_IB_HCA" in found.action


def test_tensorflow_run_gets_tensorflow_actions() -> None:
    found = rule(efficiency=0.6, framework="tensorflow")
    assert "MultiWorkerMirroredStrategy" in found.action and "no_sync" not in found.action


def test_cpu_run_has_no_gpu_topology() -> None:
    found = rule(HardwareInfo(source="cpu"), efficiency=0.6)
    assert "interconnect" not in found.evidence and found.evidence["nodes"] == 1


def test_registered_and_ranked_by_its_gain() -> None:
    assert scaling.scaling in RULES
    found = advise(H100x2, None, run(efficiency=0.5))
    assert "scaling" in ids(found)
    assert next(a for a in found if a.id == "scaling").speedup == pytest.approx(2.0)
