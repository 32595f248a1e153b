"""What stops a `tune` trial, and what a stopped one must leave as it found it.

A trial fails when its step raises (`Failed`, with `why` in one line) or when its
first batch disagrees with the eager step on the same batch and weights
(`checked`: `check_loss` and `check_grads`, against the
`accelkit.torch.tuning.reference.Reference`; the limits are
`accelkit.torch.tuning.trials.LOSS_RTOL`, ``GRAD_RTOL``, ``LOSS_NOISE_FACTOR`` and
``GRAD_AGREEMENT``); each comparison's figures and limits go into the trial's
`accelkit.profiling.tuning.Check`, passed or failed. A step that failed mid-way must not
leave the gradient scaler waiting (`reset_scaler`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable
from typing import Any

from accelkit.profiling.tuning import OUT_OF_MEMORY, Check
from accelkit.torch.training.step import Step
from accelkit.torch.tuning import trials
from accelkit.torch.tuning.reference import Reference


class Failed(Exception):
    def __init__(self, error: BaseException, batches: list[Any]) -> None:
        super().__init__(str(error))
        self.error = error
        self.batches = batches
        self.why = why(error)


def why(error: BaseException) -> str:
    if OUT_OF_MEMORY in str(error).lower() or type(error).__name__ == "OutOfMemoryError":
        return OUT_OF_MEMORY
    if isinstance(error, LossMismatch):
        return str(error)
    # torch.compile's errors say where first and what on the next lines: keep a few.
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {' '.join(lines[:3])[:240]}"


class LossMismatch(ValueError):
    """The candidate's step computes something else than the eager step."""


def checked(
    step: Step,
    reference: Reference,
    sample: Callable[[], Any],
    record: Check | None = None,
    tolerance: trials.Tolerance = trials.EXACT_ENOUGH,
) -> Step:
    """`step` that checks its first batch against the eager `reference`: the loss as its
    forward pass returns it (before its backward pass), then the gradients that batch
    gave (`sample()` less the gradients there before) at the next forward pass or
    optimizer step, whichever comes first, so a step that disagrees fails before the
    optimizer steps on it. Train every batch of the candidate's first optimizer step
    through it; `record` gets the figures compared, `tolerance` says how far they may lie."""
    forward_loss, optimizer_step = step.forward_loss, step.optimizer_step
    before = sample()
    pending = {"loss": True, "grads": False}

    def check_pending_grads() -> None:
        if pending["grads"]:
            pending["grads"] = False
            check_grads(sample() - before, reference, record, tolerance)

    def checking_forward(batch: Any) -> Any:
        check_pending_grads()
        loss = forward_loss(batch)
        if pending["loss"]:
            pending["loss"], pending["grads"] = False, True
            check_loss(float(loss.detach().float()), reference, record, tolerance)
        return loss

    def checking_optimizer_step() -> None:
        check_pending_grads()
        optimizer_step()

    return dataclasses.replace(
        step, forward_loss=checking_forward, optimizer_step=checking_optimizer_step
    )


def check_loss(
    compiled: float,
    reference: Reference,
    record: Check | None = None,
    tolerance: trials.Tolerance = trials.EXACT_ENOUGH,
) -> None:
    """LossMismatch when the compiled loss is not the eager one at the loss's own scale:
    within `tolerance.loss` of it (`trials.LOSS_RTOL` unless a lever has its own), plus
    what random draws move it where there are any
    (`accelkit.torch.tuning.reference.Reference.loss_noise`). `record` gets the relative
    difference and its limit, passed or not.

    Example:
        >>> eager, record = Reference(loss=1.4e-3, grads=None), Check()
        >>> check_loss(1.0e-3, eager, record)  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        accelkit.torch.tuning.trial_guards.LossMismatch: loss 0.001 differs from the eager ...
        >>> record.describe()
        'loss 28.6% > 2%'
    """
    record = record if record is not None else Check()
    eager = reference.loss
    if not math.isfinite(eager):  # the eager step's own NaN: the user's, not the compile's
        return
    allowed = tolerance.loss * abs(eager) + reference.loss_noise
    scale = abs(eager)
    if scale:
        record.loss_limit = _figure(allowed / scale)
    if not math.isfinite(compiled):
        record.failed = "loss"
        raise LossMismatch(f"loss {compiled} where the eager loss was {eager:.6g}")
    differs = abs(compiled - eager)
    if scale:
        record.loss_difference = _figure(differs / scale)
    if differs > allowed + trials.LOSS_ATOL:
        record.failed = "loss"
        by = f"{differs / scale * 100:.3g}% of it" if scale else f"{differs:.3g}"
        raise LossMismatch(
            f"loss {compiled:.6g} differs from the eager {eager:.6g} on the same batch "
            f"by {by}, more than {tolerance.loss:.0%}{_noise(reference.loss_noise)}"
            f"{_near_zero(eager)}"
        )


def check_grads(
    compiled: Any,
    reference: Reference,
    record: Check | None = None,
    tolerance: trials.Tolerance = trials.EXACT_ENOUGH,
) -> None:
    """LossMismatch when the compiled step's gradients (on the
    `accelkit.torch.tuning.reference.GradSample`) are not the eager ones; `record` gets
    the figure compared and its limit, passed or not.

    Without random draws, the norm of their difference must stay within
    `tolerance.grads` (`trials.GRAD_RTOL` unless a lever has its own) of the eager
    gradients' norm, or, where cuDNN's other choice of
    algorithms alone moves the eager gradients (`Reference.kernel_grads`), within
    `trials.KERNEL_SPREAD_FACTOR` times that spread, with their agreement (below) with
    the two eager passes within `trials.GRAD_AGREEMENT` of 1. With random draws
    (dropout), the compiled gradients share with the eager ones only their mean: their
    agreement,
    ``<compiled, e1 + e2> / (2 <e1, e2>)`` over two eager draws, is 1 for a correct
    step, whatever the noise (0 for a step without gradients, -1 for one going the
    wrong way), and must lie within a factor `trials.GRAD_AGREEMENT` of 1.
    """
    record = record if record is not None else Check()
    eager = reference.grads
    if eager is None or not bool(eager.isfinite().all()):  # an fp16 overflow: the scaler skips
        return
    if reference.second_grads is not None:
        _check_agreement(compiled, eager, reference.second_grads, record)
        return
    scale = float(eager.norm())
    differs = float((compiled - eager).norm())
    record.grad_limit = tolerance.grads
    if scale and math.isfinite(differs):
        record.grad_difference = _figure(differs / scale)
    if math.isfinite(differs) and differs <= tolerance.grads * scale:
        return
    if reference.kernel_grads is not None and math.isfinite(differs) and scale:
        _check_kernel_spread(
            compiled, eager, reference.kernel_grads, differs / scale, record, tolerance
        )
        return
    record.failed = "gradients"
    raise LossMismatch(
        f"gradients differ from the eager step's on the same batch: |compiled - eager| "
        f"= {differs:.3g} where |eager| = {scale:.3g}, more than {tolerance.grads:.0%}"
    )


def _check_kernel_spread(
    compiled: Any,
    eager: Any,
    other: Any,
    differs: float,
    record: Check,
    tolerance: trials.Tolerance,
) -> None:
    """The gradients `differs` (a share of the eager norm) past `tolerance.grads`, where
    cuDNN's other algorithms (`other`) move the eager ones too: within
    `trials.KERNEL_SPREAD_FACTOR` times that spread, and pointing where the two eager
    passes point (their agreement, as for random draws)."""
    spread = float((other - eager).norm() / eager.norm())
    limit = max(tolerance.grads, trials.KERNEL_SPREAD_FACTOR * spread)
    record.grad_spread, record.grad_limit = _figure(spread), _figure(limit)
    if differs > limit:
        record.failed = "gradients"
        raise LossMismatch(
            f"gradients differ from the eager step's on the same batch by {differs:.1%} of "
            f"their norm, more than {limit:.0%} ({trials.KERNEL_SPREAD_FACTOR:g}x the "
            f"{spread:.1%} cuDNN's other algorithms alone move them)"
        )
    passes = "passes (cuDNN's two choices of algorithms)"
    _check_agreement(compiled, eager, other, record, passes, refuse_undecided=True)


def _check_agreement(
    compiled: Any,
    first: Any,
    second: Any,
    record: Check,
    passes: str = "random draws",
    refuse_undecided: bool = False,
) -> None:
    """The agreement of `compiled` with the two eager `passes` within
    `trials.GRAD_AGREEMENT` of 1. Where the two share no direction no test can tell:
    the candidate passes, or fails where `refuse_undecided`."""
    shared = float(first @ second)
    if not shared > 0:
        if not refuse_undecided:
            return
        record.failed = "gradients"
        raise LossMismatch(
            f"the two eager {passes} on this batch share no direction: no check can tell "
            f"a wrong compiled step from a right one"
        )
    agreement = float(compiled @ (first + second)) / (2 * shared)
    bound = trials.GRAD_AGREEMENT
    record.agreement_limit = bound
    if math.isfinite(agreement):
        record.grad_agreement = _figure(agreement)
    if not (1 / bound <= agreement <= bound):  # also False for NaN
        record.failed = "gradients"
        raise LossMismatch(
            f"gradients disagree with the eager step's on the same batch: their agreement "
            f"with two eager {passes} is {agreement:.3g} (1 for the same step, within "
            f"{bound:g}x of it)"
        )


def _figure(value: float) -> float:
    """Four significant digits: what a reader compares with a limit, no more."""
    return float(f"{value:.4g}")


def _near_zero(eager: float) -> str:
    """What a failed loss check should add where the eager loss is near zero
    (`trials.NEAR_ZERO_LOSS`): its rounding is then a large share of it."""
    if abs(eager) >= trials.NEAR_ZERO_LOSS:
        return ""
    return (
        " (the eager loss is near zero, where rounding is a large share of it: a batch "
        "learnt by heart, such as one batch repeated, checks badly; train on fresh data)"
    )


def _noise(spread: float) -> str:
    return f" plus {spread:.3g} for its random draws" if spread else ""


def reset_scaler(scaler: Any) -> None:
    """A step that failed between the scaler's ``unscale_`` and ``update`` leaves it
    waiting for ``update``, and the next ``unscale_`` would refuse; update it once."""
    with contextlib.suppress(Exception):  # nothing recorded since the last update: fine
        scaler.update()


def inductor_cache_hits(torch: Any) -> int:
    """Graphs inductor has taken from its FX graph cache so far in this process (on disk
    across runs, in memory within one): a compile that took some there was quicker than
    compiling them, so its time says little of another mode's compile."""
    try:
        from torch._dynamo.utils import counters

        return int(counters["inductor"]["fxgraph_cache_hit"])
    except Exception:  # noqa: BLE001 - a private counter: no count, no hit
        return 0


def graph_breaks(torch: Any) -> int:
    try:
        from torch._dynamo.utils import counters

        # "graph_break" counts each break; newer releases count some under "unimplemented".
        return sum(int(sum(counters[key].values())) for key in ("graph_break", "unimplemented"))
    except Exception:  # noqa: BLE001 - a private counter: no count, no storm
        return 0
