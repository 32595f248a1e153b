"""Precision: matmuls slower than the GPU allows, or fp16 where bf16 needs no loss scaling.

The expected gain is the datasheet ratio R of the two dense peaks, capped by
what the MFU allows (Amdahl's law): at MFU u, a share u of the step runs at
the datasheet rate and speeds up by R; the rest does not. So the step speeds
up by 1 / ((1 - u) + u / R), and never by more than R.
"""

from __future__ import annotations

from accelkit.advisor.context import DEFAULT_MFU, Context
from accelkit.advisor.rules.needs import needs
from accelkit.advisor.types import Advice, Severity, amdahl
from accelkit.hardware import capabilities


@needs(
    "gpu",
    "compute_capability",
    optional=(
        "spec",
        "figure:mfu",
        "figure:matmul_dtype",
        "figure:precision",
        "plan",
        "measured_here",
        "fact:loss_scale",
    ),
    evidence={
        "matmul_dtype": None,
        "gpu": None,
        "compute_capability": None,
        "peak_*_tflops": "spec",
        "mfu": "figure:mfu",
        "loss_scale_min": "fact:loss_scale",
    },
)
def precision(ctx: Context) -> Advice | None:
    """fp32/tf32 matmuls on a tensor-core GPU, or fp16 on a GPU with bf16.

    Example:
        >>> from accelkit import plan_for
        >>> plan = plan_for("A100-SXM4-80GB", precision="fp32")
        >>> precision(Context.build(plan.hardware, plan, {"device": "cpu"})).id
        'precision'
    """
    cc = ctx.compute_capability
    if cc is None or not capabilities.has_tensor_cores(cc, ctx.gpu.name if ctx.gpu else None):
        return None
    dtype = ctx.matmul_dtype
    if dtype in ("fp32", "tf32"):
        return _faster_dtype(ctx, cc, dtype)
    if dtype == "fp16" and capabilities.has_bf16(cc):
        return _bf16_instead_of_fp16(ctx, cc)
    return None


def _faster_dtype(ctx: Context, cc: tuple[int, int], dtype: str) -> Advice:
    target = "bf16" if capabilities.has_bf16(cc) else "fp16"
    gpu = ctx.gpu
    name = gpu.name if gpu else "this GPU"
    evidence: dict[str, object] = {
        "matmul_dtype": dtype,
        "gpu": name,
        "compute_capability": f"{cc[0]}.{cc[1]}",
    }
    spec = ctx.spec
    gain, speedup = None, None
    now = spec.peak(dtype) if spec is not None else None
    then = spec.peak(target) if spec is not None else None
    if spec is not None and now and then:
        ratio = then / now
        evidence[f"peak_{dtype}_tflops"] = now
        evidence[f"peak_{target}_tflops"] = then
        mfu, measured = ctx.mfu, True
        if mfu is None:  # assumed, said so in the gain; evidence is what was measured
            mfu, measured = DEFAULT_MFU, False
        else:
            evidence["mfu"] = round(mfu, 4)
        speedup = min(amdahl(min(mfu, 1.0), ratio), ratio)
        gain = (
            f"about {speedup:.2f}x: 1 / ((1 - MFU) + MFU / R) with MFU {mfu:.1%} "
            f"({'measured' if measured else 'assumed: not measured on this GPU'}) and "
            f"R = {then:g} / {now:g} = {ratio:.1f} ({spec.name} dense {target} / {dtype} "
            f"TFLOP/s, datasheet); at most {ratio:.1f}x"
        )
    return Advice(
        id="precision",
        severity=Severity.WARNING if dtype == "fp32" else Severity.INFO,
        title=f"matmuls run in {dtype} on {name}, whose tensor cores run {target} mixed precision",
        evidence=evidence,
        action=_action(ctx, target, dtype),
        expected_gain=gain,
        speedup=speedup,
    )


def _action(ctx: Context, target: str, dtype: str) -> str:
    if ctx.torch:
        scaler = (
            "" if target == "bf16" else "; fp16 needs loss scaling: scaler = plan.grad_scaler()"
        )
        tf32 = (
            " (or at least TF32: torch.set_float32_matmul_precision('high'))"
            if dtype == "fp32" and target == "bf16"
            else ""
        )
        return (
            f"accelkit.auto_configure(precision='{target}') and train with "
            f"accelkit.torch.fit, or wrap the forward pass in `with plan.autocast():`"
            f"{scaler}{tf32}"
        )
    policy = capabilities.keras_policy(target)
    return (
        f"accelkit.auto_configure(framework='tensorflow', precision='{target}') before "
        f"building the model (keras.mixed_precision.set_global_policy('{policy}')), "
        "with a float32 output head: accelkit.keras.float32_head(model)"
    )


def _bf16_instead_of_fp16(ctx: Context, cc: tuple[int, int]) -> Advice | None:
    scale = ctx.fact("loss_scale") or {}
    history = [s for _, s in scale.get("history") or ()]
    dropped = bool(history) and min(history) < float(scale.get("initial") or history[0])
    if not ctx.torch and not dropped:
        return None  # mixed_float16 is TensorFlow's own recommendation; only evidence moves it
    evidence: dict[str, object] = {
        "matmul_dtype": "fp16",
        "gpu": ctx.gpu.name if ctx.gpu else "-",
        "compute_capability": f"{cc[0]}.{cc[1]}",
    }
    spec = ctx.spec
    if spec is not None and spec.peak("bf16") and spec.peak("fp16"):
        evidence["peak_bf16_tflops"] = spec.peak("bf16")
        evidence["peak_fp16_tflops"] = spec.peak("fp16")
    if history:
        evidence["loss_scale_min"] = min(history)
    action = (
        "accelkit.auto_configure(precision='bf16'): bf16 autocast and no GradScaler"
        if ctx.torch
        else "accelkit.auto_configure(framework='tensorflow', precision='bf16') "
        "(mixed_bfloat16; Keras then adds no LossScaleOptimizer)"
    )
    return Advice(
        id="precision_bf16",
        severity=Severity.INFO,
        title="fp16 with loss scaling on a GPU with bf16: bf16 keeps fp32's exponent range",
        evidence=evidence,
        action=action,
        expected_gain=(
            "same datasheet peak; no loss scaling, so no steps skipped on "
            "overflow and no scale to tune"
        ),
    )
