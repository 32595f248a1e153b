"""The optimizer step: a per-tensor for-loop where PyTorch has multi-tensor kernels.

``torch.optim``'s for-loop implementation updates one parameter tensor at a time,
a handful of small kernels per tensor; ``foreach`` runs each of those ops once
over lists of tensors, and ``fused`` the whole update in one kernel per group of
tensors (torch.optim docs, "Algorithms"). On a GPU the for-loop's cost grows with
the number of tensors, not their size: many small launches. The implementation
comes from `accelkit.torch.measuring.facts.optimizer_facts` (the optimizer fact); a `tune`
trial of a fused optimizer, when there was one, gives the measured gain.
"""

from __future__ import annotations

from typing import Any

from accelkit.advisor import tuning
from accelkit.advisor.context import Context
from accelkit.advisor.rules.needs import needs
from accelkit.advisor.types import Advice, Severity

WARN_MEASURED = 1.10  # a measured gain this large is a warning


@needs(
    "gpu",
    "measured_here",
    "fact:optimizer",
    optional=("tuning", "fact:parameter_bytes"),
    evidence={"optimizer.*": None, "tune.*": "tuning"},
)
def fused_optimizer(ctx: Context) -> Advice | None:
    """A GPU run whose optimizer runs the for-loop (foreach or fused available), or
    foreach where a fused kernel is available.

    Example:
        >>> from accelkit import what_if
        >>> hw = what_if("H200")
        >>> opt = {"type": "AdamW", "implementation": "for-loop", "foreach_available": True,
        ...        "fused_available": True, "set_by_user": True, "parameter_tensors": 148}
        >>> m = {"device": "cuda:0", "hardware": hw.to_dict(), "facts": {"optimizer": opt}}
        >>> fused_optimizer(Context.build(hw, None, m)).action.split(";")[0]
        'torch.optim.AdamW(model.parameters(), ..., fused=True)'
    """
    opt = ctx.fact("optimizer") or {}
    kind = opt.get("implementation")
    if not ctx.torch or ctx.gpu is None or not ctx.measured_here or not kind:
        return None
    fused, foreach = bool(opt.get("fused_available")), bool(opt.get("foreach_available"))
    slow = kind == "for-loop" and (fused or foreach)
    if not (slow or (kind == "foreach" and fused)):
        return None
    if tuning.chose(ctx, tuning.FUSED_OPTIMIZER):
        return None
    target = "fused" if fused else "foreach"
    name = str(opt.get("type", "the optimizer"))
    tensors = opt.get("parameter_tensors")
    evidence: dict[str, Any] = {f"optimizer.{k}": v for k, v in opt.items() if v is not None}
    trial = tuning.trial(ctx, tuning.FUSED_OPTIMIZER)
    measured = trial.speedup if trial is not None else None
    if trial is not None:
        evidence.update(trial.evidence())
    if measured is not None and measured <= 1.0:
        return None  # tune timed it on this model: not faster, nothing to advise
    per = (
        f"{tensors} parameter tensors, each updated by its own kernels"
        if slow
        else f"{tensors} parameter tensors in multi-tensor kernels, one op at a time"
    )
    title = f"{name} runs its {kind} implementation on {ctx.gpu.name}: {per}; {target} is available"
    if trial is not None and measured is not None:
        title += f" and ran {measured:.2f}x faster in tune's '{trial.name}' trial"
    return Advice(
        id="fused_optimizer",
        severity=(
            Severity.WARNING
            if measured is not None and measured >= WARN_MEASURED
            else Severity.INFO
        ),
        title=title,
        evidence=evidence,
        action=_action(name, target, opt, ctx.fact("parameter_bytes")),
        expected_gain=_gain(trial, measured, tensors, kind, target),
        speedup=measured,
    )


def _action(name: str, target: str, opt: dict[str, Any], param_bytes: Any) -> str:
    code = f"torch.optim.{name}(model.parameters(), ..., {target}=True)"
    notes = []
    if opt.get("set_by_user"):
        notes.append("the script sets fused/foreach itself: change it there")
    if target == "fused":
        notes.append(
            "fused does the whole update in one kernel per group of tensors "
            "(vertical and horizontal fusion, torch.optim docs)"
        )
    else:
        size = f" ({param_bytes / 2**20:,.0f} MiB here)" if param_bytes else ""
        notes.append(
            f"foreach uses about sizeof(params){size} more peak memory than the "
            "for-loop (torch.optim docs)"
        )
    notes.append("or accelkit.torch.fit(..., tune=True) times it on this model")
    return code + "; " + "; ".join(notes)


def _gain(
    trial: tuning.Compared | None, measured: float | None, tensors: Any, kind: str, target: str
) -> str:
    if measured is not None and trial is not None and trial.baseline_seconds and trial.step_seconds:
        return (
            f"measured {measured:.2f}x: {trial.baseline_seconds * 1e3:.2f} ms / "
            f"{trial.step_seconds * 1e3:.2f} ms '{trial.name}', median steps of the same "
            "run (tune)"
        )
    return (
        f"not estimated: the optimizer step is not timed apart from the rest; what it "
        f"saves grows with the {tensors} tensors the {kind} step walks, not their size. "
        f"tune=True measures {target} on this model"
    )
