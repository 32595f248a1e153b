"""float8: a bf16 PyTorch run on float8 tensor cores whose matmuls stayed in bf16.

On compute capability 8.9 and later (Ada, Hopper, Blackwell) tensor cores multiply
float8 at twice the bf16 rate. `tune` tries torchao's float8 training on the linear
layers large enough to gain, on top of the compiled step, and keeps it only where
measured faster and checked against the bf16 step (`accelkit.torch.tuning.float8`).
What float8 gains depends on the layers' sizes (its casts cost memory traffic of their
own: small layers run slower in float8), so this rule claims no gain that tune did not
measure on the run's own steps. For a bf16 run on such a GPU that did not keep float8:

- tune timed it: its paired figure against the step it was tried on top of, its status
  and why it was not kept; a gain only where it ran faster and the run did not keep it
  (its timed steps ended early);
- tune dropped it (its check against the bf16 step, or an error): why;
- tune skipped it for a reason the user can change: torchao not installed (the install
  command), the run's length unknown (``steps=``). Quiet for the other reasons (no
  linear layer large enough, a step not compiled, DDP, a run too short to pay for
  float8's compilation): the record says why, and there is nothing to change;
- tune did not run, or did not reach it: how to let it try, for a model with a linear
  layer float8 could take (the ``layers`` fact, where recorded), without DDP.

Never on a GPU below 8.9, the CPU or TensorFlow (Keras has its own float8:
``model.quantize("float8")``); quiet under precision="fp8" (float8 is on everywhere)
and where tune kept it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from accelkit.advisor import tuning
from accelkit.advisor.context import Context
from accelkit.advisor.rules.needs import needs
from accelkit.advisor.types import Advice, Severity
from accelkit.hardware import capabilities
from accelkit.hardware.capabilities import format_capability
from accelkit.profiling.tuning import UNKNOWN_LENGTH, TuneResult
from accelkit.utils.imports import install_command

MULTIPLE = 16  # float8 matmuls need both dimensions of a weight multiples of 16
WARN_MEASURED = 1.10  # a measured gain this large is a warning
_TUNE = (
    "accelkit.torch.fit(..., tune=True), accelkit.torch.tune(...) beside a hand-written "
    "loop, or AccelkitCallback(tune=True) in a Lightning or Hugging Face Trainer"
)
_HOW = (
    "; tune tries float8 matmuls (torchao) on the compiled step's large linear layers, "
    "checks them against the bf16 step and keeps them only where measured faster"
)


@needs(
    "gpu",
    "measured_here",
    "compute_capability",
    optional=("tuning", "plan", "figure:precision", "fact:layers", "fact:distributed"),
    evidence={
        "gpu": None,
        "compute_capability": None,
        "linear_layers": "fact:layers",
        "tune": None,
        "tune.*": "tuning",
    },
)
def float8(ctx: Context) -> Advice | None:
    """A bf16 PyTorch run on a GPU with float8 tensor cores that did not keep float8.

    Example:
        >>> from accelkit import plan_for
        >>> plan = plan_for("H200")
        >>> m = {"device": "cuda:0", "hardware": plan.hardware.to_dict()}
        >>> found = float8(Context.build(plan.hardware, plan, m))
        >>> found.id, found.evidence["tune"], found.speedup
        ('float8', 'not run', None)
    """
    cc = ctx.compute_capability
    if not ctx.torch or not ctx.measured_here or cc is None or not capabilities.has_fp8(cc):
        return None
    if ctx.precision != "bf16" or kept(ctx):
        return None  # float8 runs inside bf16 autocast; under fp8 it is on everywhere
    evidence: dict[str, Any] = {
        "gpu": ctx.gpu.name if ctx.gpu else "-",
        "compute_capability": format_capability(cc),
    }
    result = tuning.record(ctx)
    lever = _lever_record(result)  # float8 not tried: a record of its own
    trial = tuning.trial(ctx, tuning.FLOAT8) or lever
    if result is None or trial is None:
        return _not_tried(ctx, evidence, result, None)
    evidence.update(trial.evidence())
    if trial.status == "failed":
        return _dropped(evidence, trial)
    if trial.paired_speedup is not None or trial.step_seconds:
        return _timed(evidence, trial)
    if trial is lever:
        return _skipped(evidence, trial)
    return _not_tried(ctx, evidence, result, trial)  # its turn came after the data ended


def kept(ctx: Context) -> bool:
    """Whether the run's matmuls ran in float8: precision="fp8", or tune kept float8."""
    result = tuning.record(ctx)
    return (
        ctx.precision == "fp8"
        or tuning.chose(ctx, tuning.FLOAT8)
        or bool(result and result.decision == "tuned" and result.float8)
    )


def _lever_record(result: TuneResult | None) -> tuning.Compared | None:
    """The record of float8 not tried (skipped, or failed to start: the lever's name,
    maybe no settings), or None."""
    if result is None:
        return None
    name = tuning.FLOAT8.name
    found = next(
        (t for t in result.trials if t.name == name and t.status in ("skipped", "failed")), None
    )
    return None if found is None else tuning.Compared(**vars(found))


def _dropped(evidence: dict[str, Any], trial: tuning.Compared) -> Advice:
    why = tuning.why_dropped(trial, "the bf16 step")
    return Advice(
        id="float8",
        severity=Severity.INFO,
        title=f"float8 matmuls were dropped in tune's '{trial.name}' trial: {why}",
        evidence=evidence,
        action=(
            "nothing to change: the run keeps its bf16 matmuls. float8 rounds a layer's "
            "inputs to 3 or 2 mantissa bits with one scale per tensor; on this model its "
            "first batch moved past tune's tolerance against the bf16 step (or raised)"
        ),
        expected_gain="not measured: tune drops a candidate before timing its steps",
    )


def _timed(evidence: dict[str, Any], trial: tuning.Compared) -> Advice:
    """Tune timed float8 (paired with the step it was tried on top of) and did not keep it."""
    ratio = trial.paired_speedup or trial.speedup
    against = trial.against or "the baseline"
    if trial.paired_speedup is not None:
        evidence["tune.paired_speedup"] = trial.paired_speedup
        evidence["tune.against"] = against
        if trial.paired_spread:
            evidence["tune.paired_spread"] = trial.paired_spread
    figure = "not timed to the end" if ratio is None else f"{ratio:.2f}x the speed of '{against}'"
    spread = trial.paired_spread
    within = f", paired rounds {spread[0]:.2f}-{spread[1]:.2f}x" if spread else ""
    why = f": {trial.why}" if trial.why else ""
    if trial.status == "skipped" and ratio is not None and ratio > 1.0:
        return Advice(
            id="float8",
            severity=Severity.WARNING if ratio >= WARN_MEASURED else Severity.INFO,
            title=(
                f"float8 matmuls ran {figure}{within} in tune's '{trial.name}' trial, but "
                f"the run did not keep them ({trial.status}{why})"
            ),
            evidence=evidence,
            action=(
                "let tune finish its paired rounds: a run with more batches than its trials "
                "take (accelkit.torch.fit(..., tune=True, steps=N)); it then keeps float8 "
                "where it stays faster and checked against the bf16 step"
            ),
            expected_gain=(
                f"measured {ratio:.2f}x against '{against}'{within}: paired median steps of "
                "the same run (tune)"
            ),
            speedup=ratio,
        )
    return Advice(
        id="float8",
        severity=Severity.INFO,
        title=(
            f"tune tried float8 matmuls in its '{trial.name}' trial: {figure}{within} "
            f"({trial.status}{why}); the run kept bf16"
        ),
        evidence=evidence,
        action=(
            "nothing to change for this model at this size: float8's casts cost memory "
            "traffic of their own, so it gains on large linear layers only; tune measures "
            "it again on each tuned run (a larger model or batch may pay)"
        ),
        expected_gain="none on this model: tune measured it no faster on the run's own steps",
    )


def _skipped(evidence: dict[str, Any], skipped: tuning.Compared) -> Advice | None:
    """Tune skipped float8: advice only where the reason is one the user can change."""
    why = skipped.why or ""
    if "torchao" in why and "install" in why:
        action = f"{install_command('fp8')}; then {_TUNE}{_HOW}"
    elif why.startswith(UNKNOWN_LENGTH):
        action = (
            "tell tune the run's length: accelkit.torch.fit(..., tune=True, steps=N), or a "
            "loader with len(); float8's compilation is priced against the run left"
        )
    else:
        return None  # the model, the step or the run: the record says why
    return Advice(
        id="float8",
        severity=Severity.INFO,
        title=f"tune did not try float8 matmuls on {evidence['gpu']}: {why}",
        evidence=evidence,
        action=action,
        expected_gain=_NOT_MEASURED,
    )


_NOT_MEASURED = (
    "not measured on this model: float8's gain depends on the sizes of its linear layers "
    "(small ones run slower in float8); tune measures it on the run's own steps"
)


def _not_tried(
    ctx: Context,
    evidence: dict[str, Any],
    result: TuneResult | None,
    trial: tuning.Compared | None,
) -> Advice | None:
    """Tune did not run, or did not reach float8 (`trial`: queued, not timed): how to
    let it try."""
    if bool(ctx.fact("distributed")) or (ctx.get("world_size") or 1) > 1:
        return None  # tune does not try float8 under DDP
    layers = ctx.fact("layers")
    if isinstance(layers, list):
        count = len(convertible(layers))
        if not count:
            return None
        evidence["linear_layers"] = count
    why = tuning.why_not_timed(evidence, result, trial, "float8")
    return Advice(
        id="float8",
        severity=Severity.INFO,
        title=(
            f"{evidence['gpu']} has float8 tensor cores (compute capability "
            f"{evidence['compute_capability']}) and the run's matmuls stayed in bf16; {why}"
        ),
        evidence=evidence,
        action=(f"let tune measure them: {_TUNE}{_HOW} (torchao: {install_command('fp8')})"),
        expected_gain=_NOT_MEASURED,
    )


def convertible(layers: list[Any]) -> list[Mapping[str, Any]]:
    """The ``Linear`` layers of a ``layers`` fact whose dimensions are multiples of
    `MULTIPLE`, less the last one (the output head, which float8 leaves in bf16).

    Example:
        >>> layers = [{"name": "fc", "type": "Linear",
        ...            "dims": {"in_features": 4096, "out_features": 4096}},
        ...           {"name": "head", "type": "Linear",
        ...            "dims": {"in_features": 4096, "out_features": 1000}}]
        >>> [layer["name"] for layer in convertible(layers)]
        ['fc']
    """
    linear = [
        layer for layer in layers if isinstance(layer, Mapping) and layer.get("type") == "Linear"
    ]
    return [layer for layer in linear[:-1] if _multiples(layer.get("dims") or {})]


def _multiples(dims: Mapping[str, Any]) -> bool:
    sizes = [dims.get("in_features"), dims.get("out_features")]
    return all(isinstance(s, int) and s > 0 and s % MULTIPLE == 0 for s in sizes)
