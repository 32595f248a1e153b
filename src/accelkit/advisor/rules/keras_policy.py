"""A Keras model built before the mixed policy was set: its layers still compute in float32.

Keras fixes a layer's dtype policy when the layer is created, so
`set_global_policy("mixed_float16")` (or `auto_configure`) after the model is
built changes nothing: the matmuls stay float32 while the report says mixed.
The meter lists the matmul layers (Dense, Conv, EinsumDense, attention) whose
compute dtype differs from the global policy, leaving out the output layers
that are meant to stay float32; a composite layer (`MultiHeadAttention`) counts
once, by its own policy, not again for its `EinsumDense` sublayers.

The action fits the plan: for the run's own plan, rebuild the model after
`auto_configure()`; for a what-if plan (hardware the run was not measured on),
what to do on that hardware, with that plan's policy.
"""

from __future__ import annotations

from typing import TypedDict

from accelkit.advisor.context import DEFAULT_MFU, Context
from accelkit.advisor.rules.needs import needs
from accelkit.advisor.types import Advice, Severity, amdahl
from accelkit.hardware import capabilities

_SHOWN = 6


@needs(
    "fact:keras_policy",
    "fact:keras_layers_off_policy",
    optional=("fact:keras_matmul_layers", "spec", "figure:mfu", "plan", "measured_here"),
    evidence={
        "global_policy": None,
        "off_policy_layers": None,
        "matmul_layers": "fact:keras_matmul_layers",
    },
)
def keras_policy(ctx: Context) -> Advice | None:
    """Fires when matmul layers compute in another dtype than the global mixed policy.

    Example:
        >>> facts = {"keras_policy": "mixed_float16", "keras_layers_off_policy": [
        ...     {"name": "dense", "type": "Dense", "compute_dtype": "float32"}]}
        >>> keras_policy(Context.build(None, None, {"facts": facts})).id
        'keras_policy'
    """
    policy = ctx.fact("keras_policy")
    off = ctx.fact("keras_layers_off_policy") or []
    if not policy or not policy.startswith("mixed") or not off:
        return None
    planned = None if ctx.measured_here else ctx.plan  # a what-if: the plan's policy counts
    what_if = planned is not None
    target = capabilities.keras_policy(planned.precision) if planned is not None else policy
    if planned is not None and not capabilities.is_mixed(planned.precision):
        return None  # float32 there: the layers computing in float32 is what the plan wants
    names = [
        f"{layer.get('name')} ({layer.get('type')}, {layer.get('compute_dtype')})" for layer in off
    ]
    total = ctx.fact("keras_matmul_layers")
    evidence: dict[str, object] = {"global_policy": policy, "off_policy_layers": names}
    if total:
        evidence["matmul_layers"] = total
    shown = ", ".join(names[:_SHOWN]) + (
        f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else ""
    )
    return Advice(
        id="keras_policy",
        severity=Severity.WARNING,
        title=(
            f"{len(off)}{f' of {total}' if total else ''} matmul layer(s) compute in "
            f"float32 under the global policy {policy}: the model was built before the "
            f"policy was set ({shown})"
        ),
        evidence=evidence,
        action=_action(ctx, target, what_if),
        **_gain(ctx, target),
    )


def _action(ctx: Context, policy: str, what_if: bool) -> str:
    if what_if:
        where = ctx.gpu.name if ctx.gpu is not None else "the planned hardware"
        return (
            f"on {where}: call accelkit.auto_configure(framework='tensorflow') first "
            f"(it sets {policy}), then build and compile the model: Keras fixes a "
            "layer's dtype when the layer is created, so every matmul layer computes "
            f"in {capabilities.torch_dtype_name(capabilities.precision_of_policy(policy))}"
            " only when built after it"
        )
    return (
        "rebuild the model after accelkit.auto_configure(framework='tensorflow') (or "
        f"keras.mixed_precision.set_global_policy('{policy}')), then compile it again: "
        "Keras fixes a layer's dtype when the layer is created, so the policy must be set "
        "before building the model"
    )


class _Gain(TypedDict, total=False):
    speedup: float
    expected_gain: str


def _gain(ctx: Context, policy: str) -> _Gain:
    spec = ctx.spec
    target = capabilities.precision_of_policy(policy)
    now = "tf32" if spec is not None and spec.peak("tf32") else "fp32"
    peak_now = spec.peak(now) if spec is not None else None
    peak_target = spec.peak(target) if spec is not None else None
    if spec is None or not peak_now or not peak_target:
        return {
            "expected_gain": "not estimated: no datasheet peaks for this device "
            "(the layers run at the float32 rate instead of the "
            f"{target} one)"
        }
    ratio = peak_target / peak_now
    mfu = ctx.mfu if ctx.mfu is not None else DEFAULT_MFU
    speedup = min(amdahl(min(mfu, 1.0), ratio), ratio)
    return {
        "speedup": speedup,
        "expected_gain": (
            f"about {speedup:.2f}x if all matmuls were off-policy: "
            f"1 / ((1 - MFU) + MFU / R), MFU {mfu:.1%}"
            f"{'' if ctx.mfu is not None else ' (assumed)'}, R = "
            f"{peak_target:g} / {peak_now:g} ({spec.name} "
            f"{target} / {now}, datasheet)"
        ),
    }
