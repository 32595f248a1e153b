"""Scaling: a data-parallel run that falls short of N times one device.

Scaling efficiency is the global throughput over N devices divided by N times
the same run's throughput on one device (`accelkit.profiling.world`). What is
lost is time the devices spend not computing: waiting for the gradient
all-reduce where it does not overlap the backward pass, or waiting at the
all-reduce for the slowest rank (often one starved of input). Perfect scaling
would make the run 1 / efficiency times faster; that is the upper bound the
rule states.

Where the run measured it (PyTorch DDP: `accelkit.torch.distributed.communication`), the verdict
rests on the wait for the all-reduce: its share of the step, the gain of removing it
(1 / (1 - share), Amdahl) and the levers against it (`accelkit.advisor.rules.all_reduce`),
told apart from a rank starved of input, a straggler the others wait for, and what the
step lost elsewhere.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from accelkit.advisor.context import Context
from accelkit.advisor.rules import all_reduce
from accelkit.advisor.rules.all_reduce import Wait, waiting
from accelkit.advisor.rules.needs import needs
from accelkit.advisor.types import Advice, Severity, removing_share
from accelkit.hardware.info import HardwareInfo

GOOD = 0.90  # DDP on NVLink reaches 90-95% for large models
POOR = 0.75
SLOW_INPUT = 0.05  # the slowest rank waits this much more of its step for input than the rest
# A wait for the all-reduce this large is the verdict's cause; below it the cause is
# elsewhere (a run without a single-device figure gets a verdict from this share alone).
NOTABLE = 0.10
SEVERE = 0.25  # ...and a warning from this one


@needs(
    "figure:world_size",
    ("figure:scaling_efficiency", "figure:communication_s"),
    optional=(
        "figure:ranks",
        "figure:slowest_rank",
        "figure:global_samples_per_second",
        "figure:single_device_samples_per_second",
        "figure:step_time_s",
        "figure:peak_memory_bytes",
        "fact:communication",
        "fact:ddp",
        "batch_size",
        "tuning",
    ),
    evidence={
        "scaling_efficiency": "figure:scaling_efficiency",
        "world_size": None,
        "global_samples_per_second": "figure:global_samples_per_second",
        "single_device_samples_per_second": "figure:single_device_samples_per_second",
        "ideal_samples_per_second": "figure:single_device_samples_per_second",
        "slowest_*": ("figure:slowest_rank",),
        "fastest_step_ms": "figure:slowest_rank",
        "other_ranks_input_wait_share": "figure:slowest_rank",
        "all_reduce_*": ("figure:communication_s", "figure:ranks"),
        "waiting_for_slowest_rank_ms": "figure:ranks",
        "step_ms": ("figure:communication_s", "figure:ranks"),
        "single_device_step_ms": "figure:single_device_samples_per_second",
        "lost_ms": "figure:single_device_samples_per_second",
        "elsewhere_ms": "figure:single_device_samples_per_second",
        "gradient_mb": "fact:communication",
        "buckets": "fact:communication",
        "compression": "fact:ddp",
        "buffers": "fact:ddp",
        "batch_that_fits": "figure:peak_memory_bytes",
        "tune.*": "tuning",
        "nodes": None,
        "gpus_per_node": None,
        "interconnect": None,
        "infiniband": None,
    },
)
def scaling(ctx: Context) -> Advice | None:
    """Fires when `scaling_efficiency` < 0.9 (info) or < 0.75 (warning) on several
    devices, or, without a single-device figure, when 10% of each step or more waits for
    the gradient all-reduce (25%: a warning).

    Example:
        >>> m = {"world_size": 2, "scaling_efficiency": 0.6, "global_samples_per_second": 120.0,
        ...      "single_device_samples_per_second": 100.0}
        >>> round(scaling(Context.build(None, None, m)).speedup, 3)
        1.667
    """
    world = int(ctx.get("world_size", 1))
    efficiency = ctx.get("scaling_efficiency")
    wait = waiting(ctx)
    if world < 2 or (efficiency is not None and not 0 < efficiency < GOOD):
        return None
    if efficiency is None and (wait is None or wait.share < NOTABLE):
        return None
    ranks: Sequence[Mapping[str, Any]] = ctx.get("ranks") or ()
    evidence: dict[str, Any] = {"world_size": world}
    if efficiency is not None:
        evidence["scaling_efficiency"] = round(efficiency, 4)
    single = ctx.get("single_device_samples_per_second")
    overall = ctx.get("global_samples_per_second")
    if overall:
        evidence["global_samples_per_second"] = round(overall, 2)
    if single:
        evidence["single_device_samples_per_second"] = round(single, 2)
        evidence["ideal_samples_per_second"] = round(single * world, 2)
    starved = _slow_rank(ctx, ranks, evidence)
    evidence.update(_topology(ctx.hardware))
    head = (
        f"{world} devices run {efficiency:.0%} as fast as {world} x one device "
        f"(scaling efficiency {efficiency:.2f})"
        if efficiency is not None
        else f"{world} devices"
    )
    starving = f": rank {starved} waits longer for input" if starved is not None else ""
    if wait is None:
        speedup = 1.0 / efficiency
        return Advice(
            id="scaling",
            severity=Severity.WARNING if efficiency < POOR else Severity.INFO,
            title=head + starving,
            evidence=evidence,
            action=_action(ctx, starved, None),
            expected_gain=(
                f"up to {speedup:.2f}x: 1 / {efficiency:.3f}, an upper bound (perfect "
                "scaling, every device as fast as one alone); communication that does "
                "not overlap the backward pass keeps it below that"
            ),
            speedup=speedup,
        )
    return _measured(ctx, wait, efficiency, head, starving, starved, evidence)


def _measured(
    ctx: Context,
    wait: Wait,
    efficiency: float | None,
    head: str,
    starving: str,
    starved: int | None,
    evidence: dict[str, Any],
) -> Advice:
    """The verdict where the wait for the all-reduce was measured: its share, and the
    gain of removing it (Amdahl), against what else the step lost."""
    share = wait.share
    _wait_evidence(ctx, wait, evidence)
    lost = _lost(ctx, wait, evidence)
    cap = 1.0 / efficiency if efficiency else 1.0 / (1.0 - min(share, 0.99))
    gain = removing_share(share, cap)
    if share >= NOTABLE:
        title, speedup, expected = _the_wait_is_the_cause(head, wait, efficiency, gain, evidence)
    else:
        title, speedup, expected = _the_wait_is_not_the_cause(
            head, wait, efficiency, gain, cap, lost, evidence
        )
    severe = (efficiency is not None and efficiency < POOR) or (
        efficiency is None and share >= SEVERE
    )
    return Advice(
        id="scaling",
        severity=Severity.WARNING if severe else Severity.INFO,
        title=title + starving,
        evidence=evidence,
        action=_action(ctx, starved, wait, cap, evidence),
        expected_gain=expected,
        speedup=speedup,
    )


def _wait_evidence(ctx: Context, wait: Wait, evidence: dict[str, Any]) -> None:
    """The measured wait for the all-reduce, and what it sent, into `evidence`."""
    evidence.update(
        all_reduce_wait_share=round(wait.share, 4),
        all_reduce_wait_ms=round(wait.seconds * 1e3, 3),
        step_ms=round(wait.step * 1e3, 3),
    )
    if wait.in_flight is not None:
        evidence["all_reduce_in_flight_ms"] = round(wait.in_flight * 1e3, 3)
    if len(ctx.get("ranks") or ()) > 1:
        evidence["waiting_for_slowest_rank_ms"] = round(wait.for_slowest * 1e3, 3)
    sent = ctx.fact("communication") or {}
    if sent.get("gradient_bytes"):
        evidence["gradient_mb"] = round(sent["gradient_bytes"] / 1e6, 2)
        evidence["buckets"] = sent.get("buckets")


def _the_wait_is_the_cause(
    head: str, wait: Wait, efficiency: float | None, gain: float, evidence: Mapping[str, Any]
) -> tuple[str, float, str]:
    """(title, speedup, expected gain) where a notable share of each step waits for the
    all-reduce: removing the wait gains at most Amdahl's bound."""
    share = wait.share
    title = (
        f"{head}: {share:.0%} of each step waits for the gradient all-reduce"
        f"{_what_is_sent(evidence)}"
    )
    expected = (
        f"up to {gain:.2f}x: 1 / (1 - {share:.3f}), each step without its "
        f"{wait.seconds * 1e3:.2f} ms wait for the all-reduce (Amdahl), never more"
        + (f" than 1 / {efficiency:.3f} (perfect scaling)" if efficiency else "")
        + "; each lever below removes part of that wait"
    )
    return title, gain, expected


def _the_wait_is_not_the_cause(
    head: str,
    wait: Wait,
    efficiency: float | None,
    gain: float,
    cap: float,
    lost: float | None,
    evidence: Mapping[str, Any],
) -> tuple[str, float, str]:
    """(title, speedup, expected gain) where little of each step waits for the all-reduce:
    the step loses its time elsewhere, and perfect scaling is the bound."""
    share = wait.share
    elsewhere = (
        f", and {evidence['elsewhere_ms']:.1f} ms of the {lost * 1e3:.1f} ms each step "
        "lost against one device is elsewhere"
        if lost is not None
        else ""
    )
    title = (
        f"{head}; the gradient all-reduce is not the cause: {share:.0%} of each step "
        f"waits for it{elsewhere}"
    )
    expected = (
        f"up to {cap:.2f}x: 1 / {efficiency:.3f}, an upper bound (perfect scaling); "
        f"the wait for the all-reduce accounts for at most {gain:.2f}x of it"
        if efficiency
        else f"up to {gain:.2f}x: 1 / (1 - {share:.3f}) (Amdahl)"
    )
    return title, cap, expected


def _what_is_sent(evidence: Mapping[str, Any]) -> str:
    if "gradient_mb" not in evidence:
        return ""
    buckets = evidence.get("buckets")
    return f" ({evidence['gradient_mb']:.1f} MB of gradients per step" + (
        f", {buckets} buckets)" if buckets else ")"
    )


def _lost(ctx: Context, wait: Wait, evidence: dict[str, Any]) -> float | None:
    """Seconds each step lost against one device (batch / single-device samples/s), with
    the part not spent waiting for the all-reduce in `evidence`; None when unknown."""
    single, batch = ctx.get("single_device_samples_per_second"), ctx.batch_size
    if not single or not batch:
        return None
    alone = batch / single
    lost = max(0.0, wait.step - alone)
    evidence.update(
        single_device_step_ms=round(alone * 1e3, 3),
        lost_ms=round(lost * 1e3, 3),
        elsewhere_ms=round(max(0.0, lost - wait.seconds) * 1e3, 3),
    )
    return lost


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


def _action(
    ctx: Context,
    starved: int | None,
    wait: Wait | None,
    cap: float = 1.0,
    evidence: dict[str, Any] | None = None,
) -> str:
    steps = _slowest_rank_steps(starved, wait)
    batch = ctx.batch_size
    bigger = f"a per-device batch of {batch * 2}" if batch else "a larger per-device batch"
    hardware = ctx.hardware
    if ctx.torch and wait is not None:
        if wait.share >= NOTABLE:
            steps += all_reduce.levers(ctx, wait.share, cap, evidence or {})
        else:
            compiled = ctx.fact("compiled")
            steps.append(
                "the backward pass itself is slower beside the all-reduce (NCCL's kernels "
                "share the GPU, DDP's per-gradient host work): fewer, larger kernels help"
                + (
                    " (torch.compile: accelkit.torch.fit(..., compile=True), or tune=True)"
                    if not compiled
                    else ""
                )
                + f", and so does {bigger}"
            )
            broadcast = all_reduce.buffer_broadcast(ctx, evidence if evidence is not None else {})
            if broadcast:
                steps.append(broadcast)
    elif ctx.torch:
        steps += [
            f"{bigger}: more compute per all-reduce of the same gradient size",
            (
                "gradient accumulation: accelkit.torch.fit(..., accumulation_steps=4) all-reduces "
                "once per optimizer step (model.no_sync() on the other micro-steps)"
            ),
            (
                "accelkit.torch.fit(..., ddp={'bucket_cap_mb': 100}): fewer, larger "
                "all-reduces; it wraps with gradient_as_bucket_view=True (no gradient copy); "
                "a model the script wrapped keeps its own options, e.g. "
                "DistributedDataParallel(model, device_ids=[local_rank], bucket_cap_mb=100, "
                "gradient_as_bucket_view=True)"
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


def _slowest_rank_steps(starved: int | None, wait: Wait | None) -> list[str]:
    """What holds every rank back at the all-reduce, when one rank is slower: its input
    (`starved`, its rank) or its compute (the ranks wait for the slowest)."""
    if starved is not None:
        return [
            (
                f"rank {starved} waits longer for input than the others: look at its "
                "input pipeline first (more loader workers or tf.data parallelism, "
                "data on local disk, no shared-filesystem hot spot): every rank waits "
                "for it at each all-reduce"
            )
        ]
    if wait is not None and wait.for_slowest > wait.seconds:
        return [
            (
                f"the ranks wait up to {wait.for_slowest * 1e3:.2f} ms per step for the "
                "slowest one at the all-reduce: a rank that computes slower (a throttled or "
                "shared GPU: nvidia-smi -q -d PERFORMANCE) holds every rank back"
            )
        ]
    return []


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
