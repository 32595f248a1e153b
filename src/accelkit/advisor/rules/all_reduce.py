"""The wait for the gradient all-reduce as the ranks measured it, and the levers
against it, each with its bound.

The `scaling` rule names them when a PyTorch DDP run waited for its all-reduce
(`accelkit.torch.distributed.communication`); each gain is the step without the part of the
wait the lever can remove, 1 / (1 - removed share) (Amdahl), never more than the
rule's cap (removing the whole wait, or perfect scaling), and a figure `tune`
measured on the run itself comes before any estimate:

- bf16 gradients halve the bytes: at most half the wait goes (less when the
  buckets are latency-bound rather than bandwidth-bound);
- twice the per-device batch does twice the compute per all-reduce of the same
  gradients: half the wait per sample; accumulation over k micro-steps all-reduces
  once per k: (k - 1) / k of it;
- larger buckets and a static graph change how the wait is cut, not its bytes: no
  estimate, only tune's measurement.

`buffer_broadcast` names DDP's other collective, the broadcast of rank 0's buffers
before every forward, for a run whose loss is not the all-reduce.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from accelkit.advisor import tuning
from accelkit.advisor.context import Context
from accelkit.advisor.rules.memory import batch_that_fits
from accelkit.advisor.types import removing_share

ACCUMULATION = 4  # the micro-steps the advice names


@dataclasses.dataclass(frozen=True)
class Wait:
    """What each step waits for the gradient all-reduce, as the ranks measured it.

    Attributes:
        seconds: per step, the least any rank waited: the rank the others wait for
            waits only for the all-reduce itself.
        step: the slowest rank's step time.
        for_slowest: the most a rank waited beyond `seconds`: the all-reduce cannot end
            before the slowest rank's gradients arrive (a straggler, not the link).
        in_flight: per step, how long an all-reduce was in flight (overlapped or not).
    """

    seconds: float
    step: float
    for_slowest: float = 0.0
    in_flight: float | None = None

    @property
    def share(self) -> float:
        return min(1.0, self.seconds / self.step)


def waiting(ctx: Context) -> Wait | None:
    """The run's wait for the all-reduce: from every rank's figures where they have it,
    else from this process's own; None when it was not measured.

    Example:
        >>> ranks = [{"rank": 0, "communication_s": 0.004, "step_time_s": 0.020},
        ...          {"rank": 1, "communication_s": 0.001, "step_time_s": 0.020}]
        >>> w = waiting(Context.build(None, None, {"world_size": 2, "ranks": ranks}))
        >>> round(w.share, 3), round(w.for_slowest, 3)
        (0.05, 0.003)
    """
    ranks: Sequence[Mapping[str, Any]] = ctx.get("ranks") or ()
    timed = [r for r in ranks if r.get("communication_s") is not None and r.get("step_time_s")]
    if timed:
        waits = [float(r["communication_s"]) for r in timed]
        flights = [r["all_reduce_in_flight_s"] for r in timed if r.get("all_reduce_in_flight_s")]
        return Wait(
            seconds=min(waits),
            step=max(float(r["step_time_s"]) for r in timed),
            for_slowest=max(waits) - min(waits),
            in_flight=max(flights) if flights else None,
        )
    own, step = ctx.get("communication_s"), ctx.get("step_time_s")
    if own is None or not step:
        return None
    flight = (ctx.fact("communication") or {}).get("in_flight_s")
    return Wait(seconds=float(own), step=float(step), in_flight=flight)


def levers(ctx: Context, share: float, cap: float, evidence: dict[str, Any]) -> list[str]:
    """The levers' lines, most direct first; their figures go to `evidence`.

    Args:
        ctx: the run.
        share: the share of each step that waits for the all-reduce.
        cap: the most any lever can give (removing the whole wait, or perfect scaling).
        evidence: the verdict's evidence, completed here.

    Example:
        >>> lines = levers(Context.build(None, None, {"batch_size": 32}), 0.25, 1.33, {})
        >>> lines[0].startswith("a per-device batch of 64")
        True
    """
    ddp = ctx.fact("ddp") or {}
    if ddp.get("wrapped_by"):
        ddp = {}
    out = []
    if ctx.precision == "bf16" and ddp.get("compression") != "bf16":
        out.append(_bf16(ctx, share, cap, evidence))
    out.append(_batch(ctx, share, cap, evidence))
    gain = removing_share(share * (ACCUMULATION - 1) / ACCUMULATION, cap)
    out.append(
        f"gradient accumulation: accelkit.torch.fit(..., accumulation_steps={ACCUMULATION}) "
        f"all-reduces once per {ACCUMULATION} micro-steps (model.no_sync() on the others): "
        f"up to {gain:.2f}x, with a {ACCUMULATION}x larger global batch"
    )
    out.append(_buckets(ctx, ddp, evidence))
    return out


def _bf16(ctx: Context, share: float, cap: float, evidence: dict[str, Any]) -> str:
    gain = removing_share(share / 2, cap)
    line = (
        "bf16 gradients: accelkit.torch.fit(..., ddp={'compression': 'bf16'}) all-reduces "
        f"half the bytes: up to {gain:.2f}x if the wait halves; the plan trains in bf16 "
        "already, and tune=True measures it on this run, checking one bucket against fp32"
    )
    return line + _tuned(ctx, tuning.BF16_GRADIENTS, evidence, "tune.bf16_grads")


def _batch(ctx: Context, share: float, cap: float, evidence: dict[str, Any]) -> str:
    batch = ctx.batch_size
    gain = removing_share(share / 2, cap)
    if not batch:
        return (
            "a larger per-device batch: more compute per all-reduce of the same "
            f"gradients (twice the batch: up to {gain:.2f}x)"
        )
    fits = batch_that_fits(ctx)
    room = ""
    if fits is not None:
        evidence["batch_that_fits"] = fits
        room = (
            f" (about {fits} fits in memory)"
            if fits >= 2 * batch
            else f" (only about {fits} fits in memory: with activation checkpointing)"
        )
    return (
        f"a per-device batch of {2 * batch}{room}: twice the compute per all-reduce of the "
        f"same gradients, up to {gain:.2f}x; a run that accumulates gradients keeps its "
        "global batch with half the accumulation_steps"
    )


def _buckets(ctx: Context, ddp: dict[str, Any], evidence: dict[str, Any]) -> str:
    bucket = ddp.get("bucket_cap_mb", 25)
    line = (
        f"fewer, larger all-reduces or a static graph: accelkit.torch.fit(..., ddp="
        f"{{'bucket_cap_mb': {max(100, bucket * 2)}, 'static_graph': True}}) (now "
        f"{bucket} MB; gradient_as_bucket_view=True is on by default); no estimate: "
        "tune=True measures both on this run"
    )
    line += _tuned(ctx, tuning.LARGER_BUCKETS, evidence, "tune.buckets")
    return line + _tuned(ctx, tuning.STATIC_GRAPH, evidence, "tune.static_graph")


def buffer_broadcast(ctx: Context, evidence: dict[str, Any]) -> str | None:
    """The line on DDP's broadcast of the buffers before each forward, or None when it
    does not broadcast (no buffers, off already, a wrapper of the script's).

    Example:
        >>> ctx = Context.build(None, None, {"facts": {"ddp": {"buffers": 159}}})
        >>> buffer_broadcast(ctx, {}).startswith("DDP broadcasts rank 0's 159 buffers")
        True
    """
    ddp = ctx.fact("ddp") or {}
    if not ddp.get("buffers") or ddp.get("broadcast_buffers") is False:
        return None
    evidence["buffers"] = ddp["buffers"]
    line = (
        f"DDP broadcasts rank 0's {ddp['buffers']} buffers before every forward (BatchNorm's "
        "running statistics), kernels a host-bound step pays for in full: accelkit.torch."
        "fit(..., ddp={'broadcast_buffers': False}) stops it (the training-mode forward "
        "reads the batch's statistics, so gradients are unchanged); tune=True measures it "
        "on this run and gives every rank rank 0's buffers at the end"
    )
    return line + _tuned(ctx, tuning.NO_BUFFER_BROADCAST, evidence, "tune.no_buffer_broadcast")


def _tuned(ctx: Context, option: tuning.Option, evidence: dict[str, Any], prefix: str) -> str:
    """What tune measured for `option` on this run, for the line and the evidence."""
    trial = tuning.trial(ctx, option)
    if trial is None:
        return ""
    evidence.update(trial.evidence(prefix))
    if trial.speedup is None:
        return f"; tune tried it: {trial.status}" + (f" ({trial.why})" if trial.why else "")
    return f"; tune measured {trial.speedup:.2f}x the baseline's step: {trial.status}"
