"""Stability: non-finite losses, and fp16 loss scaling that collapsed.

A loss that turns infinite while the weights stay finite (and the fp16 loss scale
holds) did not diverge: a reduction computed in 16 bits overflowed (float16 ends at
65504: a sum of squared errors over a batch of images passes it), while its gradients,
which do not depend on the sum's value, stayed finite. That is named as such.

A dynamic loss scaler halves its scale on every step whose gradients
overflow (and skips that step), and doubles it after a run of clean steps
(2000 in PyTorch and Keras). A scale that keeps falling means steps are being
skipped; one below 1 means fp16 cannot hold the gradients even unscaled.
"""

from __future__ import annotations

import math
from typing import Any

from accelkit.advisor.context import Context
from accelkit.advisor.rules.needs import needs
from accelkit.advisor.types import Advice, Severity
from accelkit.hardware import capabilities

COLLAPSED = 1.0  # scale below 1: gradients are scaled down to fit, fp16 has run out of range
FALLEN = 2.0**10  # fell 1024-fold: at least ten net overflow steps skipped


@needs(
    ("figure:losses", "fact:first_nonfinite_loss_step"),
    optional=(
        "fact:loss_scale",
        "fact:weights_finite",
        "fact:keras_policy",
        "figure:precision",
        "plan",
        "compute_capability",
    ),
    evidence={
        "precision": ("figure:precision", "plan"),
        "nonfinite_epochs": "figure:losses",
        "epochs_recorded": "figure:losses",
        "first_nonfinite_by_step": "fact:first_nonfinite_loss_step",
        "loss_scale_last": "fact:loss_scale",
        "weights_finite": "fact:weights_finite",
    },
)
def nonfinite_loss(ctx: Context) -> Advice | None:
    """Fires when a recorded loss is NaN or infinite.

    Example:
        >>> nonfinite_loss(Context.build(None, None, {"losses": [2.3, float("nan")]})).severity
        <Severity.CRITICAL: 'critical'>
    """
    losses = [float(v) for v in ctx.get("losses", ())]
    bad = [i + 1 for i, v in enumerate(losses) if not math.isfinite(v)]
    first = ctx.fact("first_nonfinite_loss_step")
    if not bad and first is None:
        return None
    evidence: dict[str, Any] = {}
    if ctx.plan is not None or ctx.get("precision"):  # else ctx.precision is a default
        evidence["precision"] = ctx.precision
    if bad:
        evidence["nonfinite_epochs"] = bad
        evidence["epochs_recorded"] = len(losses)
    if first is not None:
        evidence["first_nonfinite_by_step"] = first
    scale = _scales(ctx)
    if scale:
        evidence["loss_scale_last"] = scale[-1]
    where = f" (by step {first})" if first is not None else f" (epoch {bad[0]})"
    if _reduction_overflowed(ctx):
        evidence["weights_finite"] = True
        return _reduction_overflow(ctx, where, evidence)
    return Advice(
        id="nonfinite_loss",
        severity=Severity.CRITICAL,
        title=f"the loss became NaN or infinite{where}: the model is not training",
        evidence=evidence,
        action=_action(ctx),
        expected_gain="no speed-up: the steps after the first NaN are wasted",
    )


@needs(
    "fact:loss_scale",
    optional=("figure:precision", "plan", "compute_capability"),
    evidence=dict.fromkeys(("initial_scale", "lowest_scale", "last_scale", "samples")),
)
def loss_scale(ctx: Context) -> Advice | None:
    """Fires when the fp16 loss scale collapsed below 1 (critical) or fell 1024-fold (warning).

    Example:
        >>> facts = {"loss_scale": {"initial": 65536.0, "history": [[50, 32.0], [100, 0.5]]}}
        >>> loss_scale(Context.build(None, None, {"facts": facts})).severity
        <Severity.CRITICAL: 'critical'>
    """
    history = _scales(ctx)
    if not history:
        return None
    initial = float((ctx.fact("loss_scale") or {}).get("initial") or history[0])
    lowest, last = min(history), history[-1]
    if lowest >= COLLAPSED and initial / lowest < FALLEN:
        return None
    halvings = math.log2(initial / lowest) if lowest > 0 else math.inf
    collapsed = last < COLLAPSED
    return Advice(
        id="loss_scale",
        severity=Severity.CRITICAL if collapsed else Severity.WARNING,
        title=(
            f"the fp16 loss scale fell from {initial:g} to {lowest:g}: at least "
            f"{halvings:.0f} steps overflowed and were skipped"
            + ("; it is below 1, fp16 cannot hold the gradients" if collapsed else "")
        ),
        evidence={
            "initial_scale": initial,
            "lowest_scale": lowest,
            "last_scale": last,
            "samples": len(history),
        },
        action=_action(ctx),
        expected_gain=(
            f"no speed-up estimate: at least {halvings:.0f} skipped optimizer "
            "steps were wasted work"
            if math.isfinite(halvings)
            else "no speed-up estimate: every step since the collapse was skipped"
        ),
    )


def _reduction_overflowed(ctx: Context) -> bool:
    """A 16-bit run whose weights ended finite and whose fp16 loss scale did not
    collapse: its gradients stayed finite (a scaler skipping steps whose gradients
    overflow halves its scale each time: below 1 within 16 such steps in a row), so
    the non-finite loss is the loss's own arithmetic."""
    policy = str(ctx.fact("keras_policy") or "")
    half = ctx.precision in ("fp16", "bf16") or policy.startswith("mixed")
    if not half or ctx.fact("weights_finite") is not True:
        return False
    return min(_scales(ctx), default=COLLAPSED) >= COLLAPSED


def _reduction_overflow(ctx: Context, where: str, evidence: dict[str, Any]) -> Advice:
    return Advice(
        id="nonfinite_loss",
        severity=Severity.WARNING,
        title=(
            f"the loss became infinite{where} while the weights stayed finite: a 16-bit "
            "overflow in the loss's reduction (float16 ends at 65504), not a diverging model"
        ),
        evidence=evidence,
        action=ctx.pick(
            torch="compute the loss in float32: loss_fn(outputs.float(), target), or sum "
            "outside torch.autocast",
            tensorflow="compute the loss in float32: cast before reducing, e.g. "
            "tf.reduce_sum(tf.square(tf.cast(y_pred, 'float32') - y)) in a custom "
            "train_step, or make the last layer float32 (dtype='float32')",
        ),
        expected_gain="no speed-up: the loss, its logs and callbacks watching it read right",
    )


def _scales(ctx: Context) -> list[float]:
    history = (ctx.fact("loss_scale") or {}).get("history") or ()
    return [float(scale) for _, scale in history]


def _action(ctx: Context) -> str:
    bf16 = capabilities.has_bf16(ctx.compute_capability)
    fp16 = ctx.precision == "fp16"
    steps = []
    if fp16 and bf16:
        steps.append(
            ctx.pick(
                torch="accelkit.auto_configure(precision='bf16'): no loss "
                "scaling needed, fp32's exponent range",
                tensorflow="accelkit.auto_configure(framework='tensorflow', "
                "precision='bf16') (mixed_bfloat16)",
            )
        )
    elif fp16:
        steps.append(
            "keep the overflowing layers (softmax, norms, attention scores) in "
            "float32, or train in fp32 (precision='fp32')"
        )
    steps.append(
        ctx.pick(
            torch="clip gradients: accelkit.torch.fit(..., max_grad_norm=1.0) (it unscales "
            "first), and lower the learning rate or add warm-up",
            tensorflow="clip gradients: keras.optimizers.Adam(..., global_clipnorm=1.0), and lower "
            "the learning rate or add warm-up",
        )
    )
    steps.append(
        ctx.pick(
            torch="find the first bad value: torch.autograd.set_detect_anomaly(True) for a few "
            "steps, and assert torch.isfinite(inputs).all() on the data",
            tensorflow="find the first bad value: tf.debugging.enable_check_numerics(), and "
            "keras.callbacks.TerminateOnNaN() to stop early",
        )
    )
    return "; ".join(steps)
