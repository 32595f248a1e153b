"""Memory: room for a larger batch, or a peak so close to the limit that the run may OOM.

Per-sample memory comes from the measured peak: (peak - model state) / batch,
where model state is weights + gradients + optimizer state as the meter
counted them (0 when unknown, which overstates the per-sample share and so
understates the batch that fits). 10% of the device is kept free for the
CUDA context, allocator fragmentation and library workspaces.

The batch suggested is at most `MAX_GROWTH` times the batch measured. The figure from
memory alone is a straight line through one measured point: it holds while the
activations grow in proportion to the batch and the peak counts every pool (a peak
that misses a CUDA graphs' private pool or a workspace undercounts the per-sample
share), and it says nothing about the step's speed or the learning rate at that batch.
So far from the measured batch (1% of an H200 reads "about 5,456" for a ResNet-50 at
64) the figure claims more than one measurement carries: the verdict suggests the
batch within `MAX_GROWTH`, states memory's own figure beside it, and asks for a run
at the new batch before going further. 16x is the range over which Goyal et al.
(2017, "Accurate, Large Minibatch SGD", ResNet-50 from 256 to 8k: 32x with warm-up)
found the linear learning-rate rule to hold with room to spare.
"""

from __future__ import annotations

from accelkit.advisor.context import Context
from accelkit.advisor.rules.needs import needs
from accelkit.advisor.types import Advice, Severity

# The measured peak may exceed the plan's prediction by this much before the verdict: the
# model predicted GPT-2 small to XL within 1.6% on an H200 with measured activations
# (docs/benchmarks.md); 15% is the bound, beyond any allocator rounding.
PREDICTION_SLACK = 0.15
LOW = 0.50  # peak below half the device: the batch could at least double
HIGH = 0.90  # peak within 10% of the device: fragmentation or a longer batch OOMs
USABLE = 0.90
MAX_GROWTH = 16  # the largest batch suggested, as a multiple of the measured one


@needs(
    "figure:peak_memory_bytes",
    "gpu",
    optional=(
        "fact:model_state_bytes",
        "batch_size",
        "figure:gpu_utilization",
        "measured_here",
        "spec",
        "figure:matmul_dtype",
        "plan",
    ),
    evidence={
        "peak_memory_gb": None,
        "device_memory_gb": None,
        "peak_share": None,
        "model_state_gb": "fact:model_state_bytes",
        "batch_size": "batch_size",
        "per_sample_mb": "batch_size",
        "batch_that_fits": "batch_size",
        "batch_memory_allows": "batch_size",
    },
)
def memory(ctx: Context) -> Advice | None:
    """Low peak memory (batch that would fit) or near the limit (OOM risk).

    Example:
        >>> from accelkit import what_if
        >>> ctx = Context.build(what_if("A100-SXM4-80GB"), None,
        ...                     {"peak_memory_bytes": 8e9, "batch_size": 32})
        >>> memory(ctx).evidence["batch_that_fits"]
        288
    """
    peak, total, batch = ctx.get("peak_memory_bytes"), ctx.gpu_memory_bytes, ctx.batch_size
    if not peak or not total:
        return None
    used = peak / total
    state = int(ctx.fact("model_state_bytes", 0))
    state = state if state < peak else 0
    evidence: dict[str, object] = {
        "peak_memory_gb": round(peak / 1e9, 3),
        "device_memory_gb": round(total / 1e9, 3),
        "peak_share": round(used, 4),
    }
    if state:
        evidence["model_state_gb"] = round(state / 1e9, 3)
    if batch:
        evidence["batch_size"] = batch
        evidence["per_sample_mb"] = round((peak - state) / batch / 1e6, 3)
    if used >= HIGH:
        return _near_limit(ctx, used, batch, evidence)
    if used <= LOW and batch:
        return _room(ctx, total, peak, state, batch, evidence)
    return None


def batch_that_fits(ctx: Context) -> int | None:
    """The per-device batch to suggest: what the measured peak memory says fits (a
    multiple of 8), at most `MAX_GROWTH` times the batch measured (module docstring); None
    when the peak, the device's memory or the batch is unknown.

    Example:
        >>> from accelkit import what_if
        >>> batch_that_fits(Context.build(what_if("A100-SXM4-80GB"), None,
        ...                               {"peak_memory_bytes": 8e9, "batch_size": 32}))
        288
    """
    allows, batch = memory_allows(ctx), ctx.batch_size
    if allows is None or not batch:
        return None
    return _multiple_of_8(min(allows, MAX_GROWTH * batch))


def memory_allows(ctx: Context) -> int | None:
    """The batch the measured peak memory alone says fits, by a straight line through the
    one batch measured: (90% of the device - model state) / per-sample memory."""
    peak, total, batch = ctx.get("peak_memory_bytes"), ctx.gpu_memory_bytes, ctx.batch_size
    if not peak or not total or not batch:
        return None
    state = int(ctx.fact("model_state_bytes", 0))
    state = state if state < peak else 0
    return _multiple_of_8(int((USABLE * total - state) / ((peak - state) / batch)))


def _multiple_of_8(batch: int) -> int:
    return batch - (batch % 8 if batch >= 8 else 0)  # tensor-core friendly


def _room(
    ctx: Context, total: int, peak: int, state: int, batch: int, evidence: dict[str, object]
) -> Advice | None:
    per_sample = (peak - state) / batch
    fits, allows = batch_that_fits(ctx) or 0, memory_allows(ctx) or 0
    if fits < 2 * batch:
        return None
    evidence["batch_that_fits"] = fits
    capped = allows > fits
    if capped:
        evidence["batch_memory_allows"] = allows
    util = ctx.get("gpu_utilization") if ctx.measured_here else None
    why = (
        f"the device is busy already (utilisation {util:.0f}%): a larger batch mostly buys "
        "fewer optimizer steps, not speed"
        if util is not None and util >= 90
        else "a larger batch gives the GPU more work per launch"
    )
    action = ctx.pick(
        torch=f"DataLoader(..., batch_size={fits}) and scale the learning rate with the batch "
        "(linear for SGD, about sqrt for Adam), or keep the batch and train a larger model",
        tensorflow=f"model.fit(..., batch_size={fits}) or dataset.batch({fits}); scale the "
        "learning rate with the batch",
    )
    size = (
        f"a batch of {fits} fits ({MAX_GROWTH} times the {batch} measured, the most "
        "suggested from one batch size)"
        if capped
        else f"a batch of about {fits} would fit (now {batch})"
    )
    return Advice(
        id="memory_headroom",
        severity=Severity.INFO,
        title=f"peak memory is {peak / total:.0%} of the device: {size}; {why}",
        evidence=evidence,
        action=action,
        expected_gain=_room_gain(total, state, per_sample, fits, allows if capped else None),
    )


def _room_gain(total: int, state: int, per_sample: float, fits: int, allows: int | None) -> str:
    """How the batch that fits was found, and where it was capped, memory's own figure."""
    memory = (
        f"({USABLE:.0%} of {total / 1e9:.1f} GB - "
        + (
            f"{state / 1e9:.2f} GB model state"
            if state
            else "model state, unknown so counted as 0: an underestimate"
        )
        + f") / {per_sample / 1e6:.2f} MB per sample (measured peak)"
    )
    if allows is None:
        return f"batch {fits} fits: {memory}; speed-up not estimated"
    return (
        f"batch {fits} fits with room to spare: memory alone, {memory}, allows about "
        f"{allows:,}, a straight line through the one batch measured (a peak that misses "
        f"a pool undercounts it); {MAX_GROWTH} times the batch is the most suggested from "
        "it: measure the new batch's peak, speed and loss before going further; speed-up "
        "not estimated"
    )


def _near_limit(
    ctx: Context, used: float, batch: int | None, evidence: dict[str, object]
) -> Advice:
    half = f"batch_size={batch // 2} " if batch and batch >= 2 else "half the batch "
    lower = (
        ""
        if ctx.matmul_dtype in ("bf16", "fp16", "fp8")
        else "; mixed precision (bf16/fp16) halves activation memory"
    )
    action = ctx.pick(
        torch=f"{half}with accelkit.torch.fit(..., accumulation_steps=2) (same effective "
        "batch); activation checkpointing on the large blocks: "
        "torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)" + lower,
        tensorflow=f"{half}with gradient accumulation (keras.optimizers.Adam(..., "
        "gradient_accumulation_steps=2)); recompute activations with "
        "tf.recompute_grad on the large blocks" + lower,
    )
    return Advice(
        id="memory_pressure",
        severity=Severity.WARNING,
        title=(
            f"peak memory is {used:.0%} of the device: a longer sequence, a larger "
            "batch or fragmentation will run out of memory"
        ),
        evidence=evidence,
        action=action,
        expected_gain="no speed-up: keeps the run from failing with out-of-memory",
    )


@needs(
    "figure:peak_memory_bytes",
    "fact:predicted_memory_bytes",
    optional=("fact:memory_choice", "fact:activation_bytes"),
    evidence={
        "peak_memory_gb": None,
        "predicted_memory_gb": None,
        "measured_over_predicted": None,
        "memory_choice": "fact:memory_choice",
        "activation_gb": "fact:activation_bytes",
    },
)
def memory_prediction(ctx: Context) -> Advice | None:
    """The plan's memory estimate (`accelkit.planning.memory`) below the peak measured, by
    more than `PREDICTION_SLACK`: a layout chosen on it may not fit.

    Example:
        >>> ctx = Context.build(None, None, {"peak_memory_bytes": 30e9,
        ...     "facts": {"predicted_memory_bytes": 20e9, "memory_choice": "ddp"}})
        >>> memory_prediction(ctx).evidence["measured_over_predicted"]
        1.5
    """
    peak, predicted = ctx.get("peak_memory_bytes"), ctx.fact("predicted_memory_bytes")
    if not peak or not predicted or peak <= predicted * (1 + PREDICTION_SLACK):
        return None
    evidence: dict[str, object] = {
        "peak_memory_gb": round(peak / 1e9, 3),
        "predicted_memory_gb": round(predicted / 1e9, 3),
        "measured_over_predicted": round(peak / predicted, 3),
    }
    if ctx.fact("memory_choice") is not None:
        evidence["memory_choice"] = ctx.fact("memory_choice")
    activations = ctx.fact("activation_bytes")
    if activations is not None:
        evidence["activation_gb"] = round(activations / 1e9, 3)
    return Advice(
        id="memory_prediction",
        severity=Severity.WARNING,
        title=(
            f"the memory estimate was {predicted / 1e9:.2f} GB per GPU; the run "
            f"peaked at {peak / 1e9:.2f} GB"
        ),
        evidence=evidence,
        action=_replan(activations, peak - predicted),
        expected_gain="none: a layout that fits, not a faster step",
    )


def _replan(activations: float | None, missed: float) -> str:
    """Plan again on what this run measured: its activations, or (measured already on
    the first step) them and what the memory model did not count."""
    if activations is None:
        return (
            "plan again with the activations this run measured: accelkit.plan_for(..., "
            "params=N, activation_bytes=<peak - state>) (or accelkit plan --params N "
            "--activation-bytes ...), so that the layout is chosen on them"
        )
    return (
        f"the estimate had the activations measured on the first step and missed "
        f"{missed / 1e9:.2f} GB more (buffers or an optimizer step it does not count): plan "
        f"runs of this model with accelkit.plan_for(..., params=N, activation_bytes="
        f"{int(activations + missed)}) so that their layout leaves room for it"
    )
