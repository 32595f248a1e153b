"""What `nccl_settings` decides for each kind of host (docs/distributed.md, "NCCL
variables"), from what-if snapshots: the datasheet's topology for N GPUs of a model.

NVLink hosts (the 2- and 4-GPU H200 machines the benchmarks ran on): nothing to set,
NCCL's defaults are right (measured: docs/benchmarks.md). PCIe hosts whose GPUs reach
each other peer-to-peer: nothing either, NCCL rings over PCIe P2P. GeForce cards
without peer-to-peer: NCCL_P2P_DISABLE=1. Several nodes without InfiniBand: name the
socket interface (advice). Never a variable that turns NVLink multicast on.
"""

from __future__ import annotations

import dataclasses

import pytest

from accelkit import plan_for, what_if
from accelkit.planning.distribution import NEVER_SET, nccl_settings


def torchrun(count: int, nodes: int = 1) -> dict[str, str]:
    return {
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": str(count * nodes),
        "LOCAL_WORLD_SIZE": str(count),
        "TORCHELASTIC_RUN_ID": "test",
    }


CASES = [
    # (GPU, per node, nodes, InfiniBand, decided {variable: value})
    ("H200 SXM", 2, 1, False, {}),  # NVLink (NV18 on the benchmark host)
    ("H200 SXM", 4, 1, False, {}),
    ("H100 SXM", 8, 1, False, {}),
    ("A100-SXM4-80GB", 8, 1, False, {}),
    ("L40S", 4, 1, False, {}),  # PCIe only, peer-to-peer
    ("L4", 2, 1, False, {}),
    ("A10", 4, 1, False, {}),
    ("RTX 6000 Ada", 4, 1, False, {}),  # workstation card, PCIe P2P
    ("RTX 4090", 2, 1, False, {"NCCL_P2P_DISABLE": "1"}),  # GeForce: no P2P
    ("RTX 4090", 4, 1, False, {"NCCL_P2P_DISABLE": "1"}),
    ("RTX 3080 Ti", 2, 1, False, {"NCCL_P2P_DISABLE": "1"}),
    ("RTX 5090", 2, 1, False, {"NCCL_P2P_DISABLE": "1"}),
    ("RTX 3090", 2, 1, False, {}),  # GeForce with an NVLink bridge: P2P
    ("RTX 3090", 4, 1, False, {"NCCL_P2P_DISABLE": "1"}),  # two bridges, no PCIe P2P
    ("A100 PCIe", 8, 1, False, {}),  # NVLink bridges of 2, PCIe P2P between them
    ("H200 NVL", 8, 1, False, {}),  # NVLink bridges of 4, PCIe P2P between them
    ("H200 SXM", 8, 2, True, {}),  # InfiniBand between the nodes: NCCL finds it
    ("H200 SXM", 8, 2, False, {"NCCL_SOCKET_IFNAME": "<fast interface>"}),
    ("RTX 4090", 4, 2, False, {"NCCL_P2P_DISABLE": "1", "NCCL_SOCKET_IFNAME": "<fast interface>"}),
]


@pytest.mark.parametrize(("gpu", "count", "nodes", "infiniband", "decided"), CASES)
def test_each_host_gets_the_nccl_variables_its_topology_calls_for(
    gpu, count, nodes, infiniband, decided
) -> None:
    hardware = dataclasses.replace(
        what_if(gpu, count, environ=torchrun(count, nodes)), infiniband=infiniband
    )
    settings = nccl_settings(hardware)
    assert {s.key.value: s.value for s in settings} == decided
    assert not {s.key.value for s in settings} & NEVER_SET
    for setting in settings:
        assert setting.reason  # each decision says why


@pytest.mark.parametrize(("gpu", "count", "nodes", "infiniband", "decided"), CASES)
def test_the_torchrun_plan_sets_what_it_decided_and_wraps_with_bucket_views(
    gpu, count, nodes, infiniband, decided
) -> None:
    if nodes > 1 or infiniband:
        pytest.skip("plan_for builds one host; the nodes come from the launcher only")
    result = plan_for(gpu, count, environ=torchrun(count))
    assert result.distribution.value == "ddp"
    env = {k: v for k, v in result.env.items() if k.startswith("NCCL_")}
    assert env == {k: v for k, v in decided.items() if not v.startswith("<")}
    assert result.value("ddp.gradient_as_bucket_view") is True
    assert not set(result.env) & NEVER_SET


def test_the_reasons_name_the_cause() -> None:
    p2p = nccl_settings(what_if("RTX 4090", 4))
    assert "no peer-to-peer access between GPUs 0-1, 0-2, 0-3, 1-2 ..." in p2p[0].reason
    socket = nccl_settings(what_if("H200 SXM", 8, environ=torchrun(8, 2)))
    assert "2 nodes and no InfiniBand device" in socket[0].reason
