"""Distribution: GPUs left idle, or the single-process DataParallel.

Several visible GPUs with one of them training leaves the rest idle; data
parallelism over N GPUs speeds an epoch up by at most N (perfect scaling).
`torch.nn.DataParallel` runs one process that scatters inputs and replicates
the model every step, bound by the GIL; PyTorch recommends
DistributedDataParallel even on one machine.
"""

from __future__ import annotations

from accelkit.advisor.context import Context
from accelkit.advisor.rules.needs import needs
from accelkit.advisor.types import Advice, Severity


@needs("fact:data_parallel", evidence={"data_parallel": None, "visible_gpus": None})
def data_parallel(ctx: Context) -> Advice | None:
    """Fires when the model is wrapped in `torch.nn.DataParallel`.

    Example:
        >>> data_parallel(Context.build(None, None, {"facts": {"data_parallel": True}})).id
        'data_parallel'
    """
    if not ctx.fact("data_parallel"):
        return None
    gpus = ctx.hardware.gpu_count
    return Advice(
        id="data_parallel",
        severity=Severity.WARNING if gpus > 1 else Severity.INFO,
        title=(
            "the model is wrapped in torch.nn.DataParallel: one process scatters the "
            "batch and replicates the model on every step"
        ),
        evidence={"data_parallel": True, "visible_gpus": gpus},
        action=(
            f"drop DataParallel and launch one process per GPU: torchrun "
            f"--nproc-per-node {max(gpus, 1)} train.py, with accelkit.torch.fit (it sets "
            "up DistributedDataParallel under torchrun) or "
            "torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])"
        ),
        expected_gain=(
            "not estimated: DistributedDataParallel overlaps the gradient "
            "all-reduce with the backward pass and has no per-step replication"
        ),
    )


@needs(
    ("gpu", "fact:visible_gpus"),
    optional=("fact:devices_used", "figure:world_size", "fact:data_parallel", "fact:distributed"),
    evidence={
        "visible_gpus": None,
        "devices_used": "fact:devices_used",
        "world_size": "figure:world_size",
    },
)
def idle_gpus(ctx: Context) -> Advice | None:
    """Fires when several GPUs are visible and one process trains on one of them.

    Example:
        >>> from accelkit import what_if
        >>> idle_gpus(Context.build(what_if("A100-SXM4-80GB", 4), None, {})).speedup
        4.0
    """
    visible = max(ctx.hardware.gpu_count, int(ctx.fact("visible_gpus", 0)))
    used = int(ctx.fact("devices_used", 1))
    world = int(ctx.get("world_size", 1))
    if visible < 2 or used > 1 or world > 1 or ctx.fact("data_parallel") or ctx.fact("distributed"):
        return None
    if ctx.hardware.mig_enabled:
        return None  # MIG slices cannot run collectives together; one per process is right
    action = ctx.pick(
        torch=(
            f"torchrun --nproc-per-node {visible} train.py: accelkit.torch.fit then trains "
            "with DistributedDataParallel, one process per GPU"
        ),
        tensorflow=(
            "plan = accelkit.auto_configure(framework='tensorflow')\n"
            "strategy = accelkit.keras.strategy(plan)  "
            f"# MirroredStrategy over the {visible} GPUs\n"
            "with strategy.scope():\n    model = build_model(); model.compile(...)"
        ),
    )
    return Advice(
        id="idle_gpus",
        severity=Severity.WARNING,
        title=f"{visible} GPUs visible, the run trained on {used}",
        evidence={
            "visible_gpus": visible,
            **({"devices_used": used} if ctx.fact("devices_used") is not None else {}),
            **({"world_size": world} if ctx.get("world_size") is not None else {}),
        },
        action=action,
        expected_gain=(
            f"up to {visible}x samples/s: {visible} GPUs at perfect scaling, same "
            "per-GPU batch (an upper bound; NCCL all-reduce costs a few percent)"
        ),
        speedup=float(visible),
    )
