"""Scaling: a data-parallel run that falls short of N times one device.

Scaling efficiency is the global throughput over N devices divided by N times
the same run's throughput on one device (`accelkit.profiling.world`). What is
lost is time the devices spend not computing: waiting for the gradient
all-reduce where it does not overlap the backward pass, or waiting at the
all-reduce for the slowest rank (often one starved of input). Perfect scaling
would make the run 1 / efficiency times faster; that is the upper bound the
rule states.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from accelkit.advisor.context import Context
from accelkit.advisor.rules.needs import needs
from accelkit.advisor.types import Advice, Severity
from accelkit.hardware.info import HardwareInfo

GOOD = 0.90  # DDP on NVLink reaches 90-95% for large models
POOR = 0.75
SLOW_INPUT = 0.05  # the slowest rank waits this much more of its step for input than the rest


@needs(
    "figure:world_size",
    "figure:scaling_efficiency",
    optional=(
        "figure:ranks",
        "figure:slowest_rank",
        "figure:global_samples_per_second",
        "figure:single_device_samples_per_second",
        "batch_size",
    ),
    evidence={
        "scaling_efficiency": None,
        "world_size": None,
        "global_samples_per_second": "figure:global_samples_per_second",
        "single_device_samples_per_second": "figure:single_device_samples_per_second",
        "ideal_samples_per_second": "figure:single_device_samples_per_second",
        "slowest_*": ("figure:slowest_rank",),
        "fastest_step_ms": "figure:slowest_rank",
        "other_ranks_input_wait_share": "figure:slowest_rank",
        "nodes": None,
        "gpus_per_node": None,
        "interconnect": None,
        "infiniband": None,
    },
)
def scaling(ctx: Context) -> Advice | None:
    """Fires when `scaling_efficiency` < 0.9 (info) or < 0.75 (warning) on several devices.

    Example:
        >>> m = {"world_size": 2, "scaling_efficiency": 0.6, "global_samples_per_second": 120.0,
        ...      "single_device_samples_per_second": 100.0}
        >>> round(scaling(Context.build(None, None, m)).speedup, 3)
        1.667
    """
    world = int(ctx.get("world_size", 1))
    efficiency = ctx.get("scaling_efficiency")
    if world < 2 or efficiency is None or efficiency <= 0 or efficiency >= GOOD:
        return None
    ranks: Sequence[Mapping[str, Any]] = ctx.get("ranks") or ()
    evidence: dict[str, Any] = {"scaling_efficiency": round(efficiency, 4), "world_size": world}
    single = ctx.get("single_device_samples_per_second")
    overall = ctx.get("global_samples_per_second")
    if overall:
        evidence["global_samples_per_second"] = round(overall, 2)
    if single:
        evidence["single_device_samples_per_second"] = round(single, 2)
        evidence["ideal_samples_per_second"] = round(single * world, 2)
    starved = _slow_rank(ctx, ranks, evidence)
    evidence.update(_topology(ctx.hardware))
    speedup = 1.0 / efficiency
    return Advice(
        id="scaling",
        severity=Severity.WARNING if efficiency < POOR else Severity.INFO,
        title=(
            f"{world} devices run {efficiency:.0%} as fast as {world} x one device "
            f"(scaling efficiency {efficiency:.2f})"
            + (f": rank {starved} waits longer for input" if starved is not None else "")
        ),
        evidence=evidence,
        action=_action(ctx, starved),
        expected_gain=(
            f"up to {speedup:.2f}x: 1 / {efficiency:.3f}, an upper bound (perfect "
            "scaling, every device as fast as one alone); communication that does "
            "not overlap the backward pass keeps it below that"
        ),
        speedup=speedup,
    )


def _slow_rank(
    ctx: Context, ranks: Sequence[Mapping[str, Any]], evidence: dict[str, Any]
) -> int | None:
    """Add the slowest rank's figures to `evidence`; its rank if its input is the cause."""
    slowest = ctx.get("slowest_rank")
    if slowest is None or len(ranks) < 2:
        return None
    mine = next((r for r in ranks if r.get("rank") == slowest), None)
    others = [r for r in ranks if r.get("rank") != slowest]
    if mine is None or not others:
        return None
    evidence["slowest_rank"] = slowest
    steps = [r["step_time_s"] for r in ranks if r.get("step_time_s")]
    if mine.get("step_time_s") and steps:
        evidence["slowest_step_ms"] = round(mine["step_time_s"] * 1e3, 3)
        evidence["fastest_step_ms"] = round(min(steps) * 1e3, 3)
    wait = mine.get("input_wait_share")
    waits = [r["input_wait_share"] for r in others if r.get("input_wait_share") is not None]
    if wait is None or not waits:
        return None
    rest = sum(waits) / len(waits)
    evidence["slowest_rank_input_wait_share"] = round(wait, 4)
    evidence["other_ranks_input_wait_share"] = round(rest, 4)
    return int(slowest) if wait - rest >= SLOW_INPUT else None


def _topology(hardware: HardwareInfo) -> dict[str, Any]:
    found: dict[str, Any] = {"nodes": hardware.launcher.nodes}
    if hardware.gpus:
        found["gpus_per_node"] = hardware.gpu_count
        found["interconnect"] = _interconnect(hardware)
    if found["nodes"] > 1:
        found["infiniband"] = hardware.infiniband
    return found


def _interconnect(hardware: HardwareInfo) -> str:
    if len(hardware.gpus) < 2 or not hardware.links:
        return "unknown"
    if hardware.all_nvlink:
        return "NVLink"
    if hardware.all_peers_reachable is False:
        return "PCIe without peer-to-peer (through host memory)"
    if any(link.nvlink for link in hardware.links):
        return "NVLink between some pairs, PCIe between others"
    return "PCIe" + (" peer-to-peer" if hardware.all_peers_reachable else "")


def _action(ctx: Context, starved: int | None) -> str:
    steps: list[str] = []
    if starved is not None:
        steps.append(
            f"rank {starved} waits longer for input than the others: look at its "
            "input pipeline first (more loader workers or tf.data parallelism, "
            "data on local disk, no shared-filesystem hot spot): every rank waits "
            "for it at each all-reduce"
        )
    batch = ctx.batch_size
    bigger = f"a per-device batch of {batch * 2}" if batch else "a larger per-device batch"
    hardware = ctx.hardware
    if ctx.torch:
        steps += [
            f"{bigger}: more compute per all-reduce of the same gradient size",
            (
                "gradient accumulation: accelkit.torch.fit(..., accumulation_steps=4) all-reduces "
                "once per optimizer step (model.no_sync() on the other micro-steps)"
            ),
            (
                "DistributedDataParallel(model, device_ids=[local_rank], bucket_cap_mb=100, "
                "gradient_as_bucket_view=True): fewer, larger all-reduces and no gradient copy "
                "(wrap it yourself; accelkit.torch.fit keeps a model the script wrapped)"
            ),
        ]
    else:
        steps += [
            f"{bigger} per replica (global batch = per-replica batch x replicas)",
            (
                "tf.distribute.MultiWorkerMirroredStrategy(communication_options="
                "tf.distribute.experimental.CommunicationOptions(implementation="
                "tf.distribute.experimental.CommunicationImplementation.NCCL, "
                "bytes_per_pack=50 * 2**20)): NCCL, gradients packed into fewer all-reduces"
            ),
        ]
    steps.extend(_link_steps(hardware))
    return "\n".join(steps)


def _link_steps(hardware: HardwareInfo) -> list[str]:
    out = []
    if hardware.gpus and hardware.all_peers_reachable is False:
        out.append(
            "these GPUs have no peer-to-peer path, so NCCL copies through host "
            "memory: GPUs on one NVLink or PCIe switch (nvidia-smi topo -m) scale better"
        )
    elif hardware.gpus and hardware.all_nvlink:
        out.append(
            "NVLink joins these GPUs: NCCL_DEBUG=INFO should log its channels 'via "
            "P2P'; leave NCCL_P2P_DISABLE unset so NCCL uses it"
        )
    if hardware.launcher.nodes > 1:
        if hardware.infiniband:
            out.append(
                "between nodes NCCL should use InfiniBand: NCCL_DEBUG=INFO should log "
                "'NET/IB'; if it says 'NET/Socket', check NCCL_IB_HCA and that the "
                "container sees /dev/infiniband"
            )
        else:
            out.append(
                "no InfiniBand between the nodes: NCCL uses TCP sockets; set "
                "NCCL_SOCKET_IFNAME to the fastest interface, or use RDMA (InfiniBand, "
                "RoCE) nodes"
            )
    return out
