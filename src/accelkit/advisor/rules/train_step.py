"""A Keras `train_step` of the user's own that does not scale its loss under mixed_float16.

Keras' `compile` wraps the optimizer in a `LossScaleOptimizer` under ``mixed_float16``,
and its `apply` divides every gradient by the loss scale (32768 at first). A custom
`train_step` that computes ``tape.gradient(loss, ...)`` without
``self.optimizer.scale_loss(loss)`` trains on gradients that many times too small, with
no error. `accelkit.keras.ProfileCallback` applies them as computed
(`accelkit.frameworks.keras_train_step`), which leaves the step without loss scaling; a plain
``model.fit`` does not. On a what-if plan whose policy is ``mixed_float16`` (a T4, a
V100), a float32 run's step is judged as it would train there.
"""

from __future__ import annotations

from typing import Any

from accelkit.advisor.context import Context
from accelkit.advisor.rules.needs import needs
from accelkit.advisor.types import Advice, Severity
from accelkit.hardware import capabilities

FIX = (
    "scale the loss inside the GradientTape as Keras' own train_step does: "
    "scaled = self.optimizer.scale_loss(loss), then grads = tape.gradient(scaled, "
    "self.trainable_weights) and self.optimizer.apply_gradients(zip(grads, "
    "self.trainable_weights))"
)
_INITIAL_SCALE = 2.0**15  # Keras' LossScaleOptimizer default


@needs(
    "fact:custom_train_step",
    optional=("fact:keras_policy", "fact:loss_scale", "plan", "measured_here"),
    evidence=dict.fromkeys(("model_class", "policy", "loss_scale", "compensated", "gpu")),
)
def unscaled_train_step(ctx: Context) -> Advice | None:
    """Fires when a custom `train_step` that does not call ``scale_loss`` trains (or, on
    a what-if plan, would train) under ``mixed_float16``: critical when its gradients
    were divided by the loss scale, a warning when accelkit applied them as computed
    or the run was measured elsewhere.

    Example:
        >>> facts = {"keras_policy": capabilities.keras_policy("fp16"),   # mixed_float16
        ...          "custom_train_step": {"model_class": "VAE", "scales_loss": False}}
        >>> unscaled_train_step(Context.build(None, None, {"facts": facts})).severity
        <Severity.CRITICAL: 'critical'>
    """
    step = ctx.fact("custom_train_step") or {}
    policy, what_if = _policy(ctx)
    if step.get("scales_loss") is not False or policy != capabilities.keras_policy("fp16"):
        return None
    name = step.get("model_class") or "the model"
    scale = _initial_scale(ctx)
    evidence: dict[str, Any] = {"model_class": name, "policy": policy, "loss_scale": scale}
    if what_if:
        evidence["gpu"] = ctx.gpu.name if ctx.gpu is not None else None
        where = f"on {evidence['gpu'] or 'the planned hardware'} ({policy}), "
        title = (
            f"{where}{name}.train_step would train on gradients divided by the loss scale "
            f"({scale:g}): it does not call self.optimizer.scale_loss(loss)"
        )
        severity = Severity.WARNING
    elif step.get("compensated"):
        evidence["compensated"] = True
        title = (
            f"{name}.train_step does not call self.optimizer.scale_loss(loss) under "
            f"{policy}: accelkit applied its gradients as computed (Keras would divide them "
            f"by {scale:g}), without loss scaling, so small float16 gradients can underflow"
        )
        severity = Severity.WARNING
    else:
        title = (
            f"{name}.train_step trained on gradients divided by the loss scale ({scale:g}): "
            f"it does not call self.optimizer.scale_loss(loss) under {policy}"
        )
        severity = Severity.CRITICAL
    return Advice(
        id="unscaled_train_step",
        severity=severity,
        title=title,
        evidence=evidence,
        action=f"{FIX}; or train under mixed_bfloat16 where the GPU has bf16 (no loss scaling)",
        expected_gain="no speed-up: a correctness fix",
    )


def _policy(ctx: Context) -> tuple[str | None, bool]:
    """(the Keras policy the step trains under, whether it is a what-if plan's)."""
    if ctx.plan is not None and not ctx.measured_here:
        return capabilities.keras_policy(ctx.plan.precision), True
    return ctx.fact("keras_policy"), False


def _initial_scale(ctx: Context) -> float:
    return float((ctx.fact("loss_scale") or {}).get("initial") or _INITIAL_SCALE)
