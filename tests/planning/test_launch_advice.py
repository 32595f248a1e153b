"""A plan for several GPUs without a launcher says how to launch them, and which NCCL
variables the launched run will get: the same ones its own plan then sets."""

from __future__ import annotations

import shlex

from hypothesis import given, settings
from hypothesis import strategies as st

from accelkit import plan_for, specs
from accelkit.hardware.info import MAX_GPUS_PER_NODE
from accelkit.hardware.what_if import server_gpus
from accelkit.planning.distribution import NEVER_SET

GPUS = sorted({row.name for row in specs.all_specs()})


def _launched(gpu: str, count: int):
    environ = {
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": str(count),
        "LOCAL_WORLD_SIZE": str(count),
        "MASTER_ADDR": "localhost",
    }
    return plan_for(gpu, count, environ=environ)


def test_geforce_40_series_launch_names_nccl_p2p_disable() -> None:
    planned = plan_for("NVIDIA GeForce RTX 4090", 4)
    advice = planned.get("launch")
    assert advice.value == "NCCL_P2P_DISABLE=1 torchrun --nproc-per-node 4 your_script.py"
    # the what-if is planned as launched: the variable is a setting of its own, with its why
    assert "NCCL_P2P_DISABLE=1" in advice.reason
    assert "peer-to-peer" in planned.get("NCCL_P2P_DISABLE").reason
    assert _launched("NVIDIA GeForce RTX 4090", 4).env["NCCL_P2P_DISABLE"] == "1"


def test_nvlink_servers_launch_with_nccl_defaults() -> None:
    advice = plan_for("H100 SXM", 8).get("launch")
    assert advice.value == "torchrun --nproc-per-node 8 your_script.py"


def test_past_one_server_the_launch_spans_servers() -> None:
    advice = plan_for("L4", 40).get("launch")
    assert "--nnodes 3 --nproc-per-node 16" in advice.value
    assert "NCCL_SOCKET_IFNAME" in advice.reason and "<" not in advice.value


@settings(max_examples=80, deadline=None)
@given(gpu=st.sampled_from(GPUS), count=st.integers(2, MAX_GPUS_PER_NODE))
def test_the_launch_advice_sets_what_the_launched_plan_sets(gpu, count) -> None:
    words = shlex.split(plan_for(gpu, count).get("launch").value)
    prefix = dict(w.split("=", 1) for w in words[: words.index("torchrun")])
    launched = {k: v for k, v in _launched(gpu, count).env.items() if k.startswith("NCCL_")}
    assert prefix == launched
    assert not set(prefix) & NEVER_SET


@settings(max_examples=60, deadline=None)
@given(gpu=st.sampled_from(GPUS), count=st.integers(2, MAX_GPUS_PER_NODE))
def test_the_launch_spans_the_servers_its_model_fills(gpu, count) -> None:
    """16 H100 SXM are two HGX servers of 8 (no server holds 16 of them): the launch runs
    8 processes on each of 2 nodes; 16 L4 cards fit one server."""
    per_server = server_gpus(specs.resolve(gpu)[0])
    words = shlex.split(plan_for(gpu, count).get("launch").value)
    if count > per_server:
        nodes = -(-count // per_server)
        assert words[words.index("--nnodes") + 1] == str(nodes)
        assert words[words.index("--nproc-per-node") + 1] == str(per_server)
    else:
        assert "--nnodes" not in words
        assert words[words.index("--nproc-per-node") + 1] == str(count)


def test_sixteen_h100_sxm_launch_on_two_nodes_of_eight() -> None:
    advice = plan_for("H100 SXM", 16).get("launch")
    assert "torchrun --nnodes 2 --nproc-per-node 8" in advice.value
    assert "over 2 servers" in advice.reason
    assert "--nproc-per-node 16 " in plan_for("L4", 16).get("launch").value


def test_eight_gb200_launch_on_two_trays_of_four_joined_by_nvlink() -> None:
    """A GB200 NVL72 compute tray holds 4 GPUs (its row's `server_gpus`), and the rack's
    NVLink domain spans its 18 trays: no server runs 8 processes of GB200s."""
    planned = plan_for("GB200", 8)
    assert "torchrun --nnodes 2 --nproc-per-node 4" in planned.get("launch").value
    sockets = planned.get("NCCL_SOCKET_IFNAME").reason
    assert "over NVLink" in sockets and "bootstrap over TCP" in sockets
    assert "no InfiniBand" not in sockets


@settings(max_examples=60, deadline=None)
@given(gpu=st.sampled_from(GPUS), count=st.integers(2, 200))
def test_the_socket_reason_says_nvlink_exactly_where_one_domain_spans_the_servers(
    gpu, count
) -> None:
    spec = specs.resolve(gpu)[0]
    spans = (
        count > server_gpus(spec) and bool(spec.nvlink_gbps) and count <= (spec.nvlink_gpus or 0)
    )
    planned = plan_for(gpu, count)
    reason = planned.get("NCCL_SOCKET_IFNAME").reason if count > server_gpus(spec) else ""
    assert ("over NVLink" in reason) is spans
