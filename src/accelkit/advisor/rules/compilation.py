"""torch.compile: an eager PyTorch step on a GPU pays for every op it does not fuse.

A training step's matmuls run near the tensor cores' rate with or without
compilation; the rest of the step (element-wise ops, norms, softmax, dropout,
the loss, the optimizer, and the gaps between kernel launches) is where
TorchInductor's fusion saves memory traffic and launches. So the gain follows
from how much of the measured step is *not* matmuls:

    r = 1 - MFU - input wait share     (MFU against the datasheet peak: matmul time
                                        at that peak, a lower bound on the real one)
    estimate = 1 / ((1 - r) + r / F)   (Amdahl's law), at most F

with F = `FUSION`, the smallest speed-up that part got from ``compile=True`` in
accelkit's own H200 measurements. A `tune` trial on the run's model replaces the
estimate by its measured figure.
"""

from __future__ import annotations

from typing import Any

from accelkit.advisor import tuning
from accelkit.advisor.context import Context
from accelkit.advisor.rules.needs import needs
from accelkit.advisor.types import Advice, Severity, amdahl

# How much faster torch.compile ran the non-matmul part of the step, from docs/benchmarks.md
# (one H200, bf16, MFU against the 989.4 TFLOP/s datasheet peak, eager -> compile=True):
#   GPT-2 small: 43.50 -> 34.01 ms at MFU 32.5%: r = 0.675 -> 0.782 - 0.325 = 0.457: 1.48x
#   ResNet-50:   54.72 -> 37.46 ms at MFU 11.5%: r = 0.885 -> 0.685 - 0.115 = 0.570: 1.55x
# The smaller of the two, so the estimate leans low.
FUSION = 1.48
FUSION_SOURCE = (
    "the smallest speed-up compile=True gave that part in accelkit's H200 "
    "benchmarks: GPT-2 small 1.48x, ResNet-50 1.55x (docs/benchmarks.md)"
)
WARN_ESTIMATE = 1.25  # an estimate this large is worth a warning
WARN_MEASURED = 1.10  # a measured figure needs less margin
QUIET_BELOW = 1.05  # an estimate under 5% is within what the assumed F can be off by


@needs(
    "gpu",
    "measured_here",
    ("fact:compiled", "fact:model_compiled"),
    optional=(
        "tuning",
        "figure:step_time_s",
        "figure:mfu",
        "figure:mfu_calibrated",
        "figure:input_wait_share",
        "figure:flops_per_step",
    ),
    evidence={
        "compiled": None,
        "model_compiled": None,
        "gpu": None,
        "step_time_ms": "figure:step_time_s",
        "tune.*": "tuning",
        "mfu": ("figure:mfu", "figure:mfu_calibrated"),
        "mfu_against": ("figure:mfu", "figure:mfu_calibrated"),
        "non_matmul_share": ("figure:mfu", "figure:mfu_calibrated"),
        "input_wait_share": "figure:input_wait_share",
        "flops_per_step": "figure:flops_per_step",
    },
)
def torch_compile(ctx: Context) -> Advice | None:
    """An uncompiled PyTorch run measured on a GPU: compile it, with the measured or
    estimated gain. Quiet for Keras, CPU runs, compiled runs and runs whose tuning
    kept a compiled candidate.

    Example:
        >>> from accelkit import what_if
        >>> hw = what_if("H200")
        >>> m = {"device": "cuda:0", "hardware": hw.to_dict(), "mfu": 0.126,
        ...      "input_wait_share": 0.0, "step_time_s": 0.112, "facts": {"compiled": False}}
        >>> round(torch_compile(Context.build(hw, None, m)).speedup, 2)
        1.4
    """
    if not ctx.torch or ctx.gpu is None or not ctx.measured_here:
        return None
    fit = ctx.fact("compiled") is not None  # accelkit.torch.fit records it; a Meter does not
    if ctx.fact("compiled") or ctx.fact("model_compiled"):
        return None
    if not fit and ctx.fact("model_compiled") is None:
        return None  # nothing says whether the model was compiled
    if tuning.chose(ctx, tuning.COMPILE):
        return None
    trial = tuning.trial(ctx, tuning.COMPILE_ALONE)  # CUDA graphs: the cuda_graphs rule's
    if trial is not None and trial.step_seconds and trial.baseline_seconds:
        return _measured(ctx, trial, fit)
    if trial is not None and trial.status == "failed":
        return _failed(ctx, trial)
    return _estimated(ctx, fit, trial)


def _evidence(ctx: Context, fit: bool) -> dict[str, Any]:
    evidence: dict[str, Any] = {"compiled": False, "gpu": ctx.gpu.name if ctx.gpu else "-"}
    if not fit:
        evidence["model_compiled"] = False
    step = ctx.get("step_time_s")
    if step:
        evidence["step_time_ms"] = round(step * 1e3, 3)
    return evidence


def _measured(ctx: Context, trial: tuning.Compared, fit: bool) -> Advice:
    evidence = {**_evidence(ctx, fit), **trial.evidence()}
    assert trial.baseline_seconds and trial.step_seconds  # the caller checked: both timed
    ratio = trial.speedup or 0.0
    base_ms, cand_ms = trial.baseline_seconds * 1e3, trial.step_seconds * 1e3
    if ratio <= 1.0:
        return Advice(
            id="compile",
            severity=Severity.INFO,
            title=(
                f"torch.compile was measured slower on this model: {cand_ms:.2f} ms against "
                f"{base_ms:.2f} ms eager per step (tune's '{trial.name}' trial)"
            ),
            evidence=evidence,
            action=(
                "keep compile off for this model; torch._dynamo.explain(model)(*batch) "
                "shows graph breaks that can make a compiled step slower"
            ),
            expected_gain=(
                f"none: measured {ratio:.2f}x ({base_ms:.2f} / {cand_ms:.2f} ms, "
                "median steps of the same run)"
            ),
        )
    why = f" ({trial.why})" if trial.why else ""
    return Advice(
        id="compile",
        severity=Severity.WARNING if ratio >= WARN_MEASURED else Severity.INFO,
        title=(
            f"torch.compile ran this model {ratio:.2f}x faster in tune's '{trial.name}' "
            f"trial, but the run trained eagerly{why}"
        ),
        evidence=evidence,
        action=_action(fit),
        expected_gain=(
            f"measured {ratio:.2f}x: {base_ms:.2f} ms eager / {cand_ms:.2f} ms "
            f"'{trial.name}', median steps of the same run (tune)"
            + (
                f"; compiling took {trial.compile_seconds:.0f} s once"
                if trial.compile_seconds
                else ""
            )
        ),
        speedup=ratio,
    )


def _failed(ctx: Context, trial: tuning.Compared) -> Advice:
    return Advice(
        id="compile",
        severity=Severity.INFO,
        title=f"torch.compile failed on this model in tune's '{trial.name}' trial: {trial.why}",
        evidence={**_evidence(ctx, True), **trial.evidence()},
        action=(
            "torch._dynamo.explain(model)(*batch) names the ops that break the graph; "
            "fix or isolate them (torch.compiler.disable on a helper), then "
            "accelkit.torch.fit(..., tune=True) measures compile again"
        ),
        expected_gain="not estimated: the compiled step did not run",
    )


def _estimated(ctx: Context, fit: bool, trial: tuning.Compared | None) -> Advice | None:
    evidence = _evidence(ctx, fit)
    if trial is not None:
        evidence.update(trial.evidence())
    mfu, against = ctx.mfu_measured or (None, "")
    wait = ctx.get("input_wait_share") or 0.0
    name = ctx.gpu.name if ctx.gpu else "the GPU"
    if mfu is None:
        return Advice(
            id="compile",
            severity=Severity.INFO,
            title=f"the step runs eagerly (uncompiled) on {name}",
            evidence=evidence,
            action=_action(fit),
            expected_gain=(
                "not estimated: without a FLOP count and a peak for this run the "
                "share of the step outside matmuls is unknown; "
                "accelkit.torch.fit(..., tune=True) measures it on this model"
            ),
        )
    rest = max(0.0, 1.0 - min(mfu, 1.0) - wait)
    speedup = amdahl(rest, FUSION)
    if speedup < QUIET_BELOW:
        return None  # the step is nearly all matmuls (or input wait): little left to fuse
    evidence.update(mfu=round(mfu, 4), mfu_against=against, non_matmul_share=round(rest, 4))
    if ctx.get("input_wait_share") is not None:
        evidence["input_wait_share"] = round(wait, 4)
    if ctx.get("flops_per_step"):
        evidence["flops_per_step"] = ctx.get("flops_per_step")
    return Advice(
        id="compile",
        severity=Severity.WARNING if speedup >= WARN_ESTIMATE else Severity.INFO,
        title=(
            f"the step runs eagerly on {name}: {rest:.0%} of it is outside the matmuls, "
            "where torch.compile fuses ops"
        ),
        evidence=evidence,
        action=_action(fit),
        expected_gain=(
            f"estimate, about {speedup:.2f}x: 1 / ((1 - r) + r / {FUSION}) with r = {rest:.1%}, "
            f"the step outside matmuls and input wait (1 - MFU {mfu:.1%} against {against} "
            f"- input wait {wait:.1%}; matmul time counted at that rate, so r is an upper "
            f"bound) and {FUSION} = {FUSION_SOURCE}; at most {FUSION}x. Not measured on this "
            "model: tune=True measures it"
        ),
        speedup=speedup,
    )


def _action(fit: bool) -> str:
    if fit:
        return (
            "accelkit.torch.fit(model, loader, optimizer, loss_fn, compile=True), or "
            "tune=True to time eager against compile (and a fused optimizer) on this model "
            "and keep the fastest; the first steps compile (tens of seconds, once)"
        )
    return (
        "model = torch.compile(model) before the loop (or compile the function that runs "
        "forward and loss together, so the loss fuses into the last layer); "
        "the first steps compile (tens of seconds, once). A loop that already compiles "
        "its step function says so with meter.facts['compiled'] = True"
    )
