"""What `tune` measured on the run's own model, as the rules read it (``report.tuning``).

`accelkit.torch.fit(..., tune=True)` times candidate settings (eager, a fused
optimizer, torch.compile) on the user's model for a few real steps and keeps the
fastest. Its record, ``report.to_dict()["tuning"]``, is None when the run was not
tuned, else `accelkit.profiling.tuning.TuneResult.to_dict()`: the decision, the
kept candidate, and per candidate its settings (``{"compile": bool, "optimizer":
"fused" | "foreach" | "default"}``, ``"cudagraphs": True`` for CUDA graphs,
``"compile_mode"`` for max-autotune, ``"float8": True`` for float8 matmuls), status,
median step and spread, and for a checked candidate how its first batch compared with
the eager step (``check``: `accelkit.profiling.tuning.Check`).

A rule that can point at a measured figure uses it before any estimate: the
same model, the same run, median step times.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from accelkit.advisor.context import Context
from accelkit.profiling import levers
from accelkit.profiling.tuning import Trial, TuneResult

# The levers as the record names them: one registry with the trials
# (`accelkit.profiling.levers.REGISTRY`), each one `on(settings)` for a record's settings.
Option = levers.LeverInfo
COMPILE = levers.COMPILE
# torch.compile's CUDA graphs; such a candidate is compiled too ("compile": True), so
# compile's own figure is COMPILE_ALONE's.
CUDA_GRAPHS = levers.CUDA_GRAPHS
COMPILE_ALONE = levers.COMPILE_ALONE
SDPA_ATTENTION = levers.SDPA_ATTENTION
FUSED_OPTIMIZER = levers.FUSED_OPTIMIZER
BF16_GRADIENTS = levers.BF16_GRADIENTS
LARGER_BUCKETS = levers.LARGER_BUCKETS
STATIC_GRAPH = levers.STATIC_GRAPH
NO_BUFFER_BROADCAST = levers.NO_BUFFER_BROADCAST
FLOAT8 = levers.FLOAT8


@dataclasses.dataclass
class Compared(Trial):
    """A candidate `tune` measured, with the baseline's median step of the same run."""

    baseline_seconds: float | None = None
    over_baseline: float | None = None

    @property
    def speedup(self) -> float | None:
        """How many times faster than the baseline it ran (> 1: faster): its paired
        rounds' figure (`TuneResult.speedup_of`, which load on the machine cannot
        inflate), else, in a record saved before paired rounds, the baseline's median
        step over its own."""
        if self.over_baseline is not None:
            return self.over_baseline
        if not self.step_seconds or not self.baseline_seconds:
            return None
        return self.baseline_seconds / self.step_seconds

    def evidence(self, prefix: str = "tune") -> dict[str, Any]:
        """Its figures, for an `Advice`'s evidence."""
        found: dict[str, Any] = {f"{prefix}.candidate": self.name, f"{prefix}.status": self.status}
        if self.step_seconds:
            found[f"{prefix}.step_ms"] = round(self.step_seconds * 1e3, 3)
        if self.baseline_seconds:
            found[f"{prefix}.baseline_step_ms"] = round(self.baseline_seconds * 1e3, 3)
        if self.spread:
            found[f"{prefix}.spread_ms"] = [round(s * 1e3, 3) for s in self.spread]
        if self.compile_seconds is not None:
            found[f"{prefix}.compile_s"] = round(self.compile_seconds, 1)
        if self.why:
            found[f"{prefix}.why"] = self.why
        if self.check is not None:
            figures = dataclasses.asdict(self.check)
            found.update({f"{prefix}.check.{k}": v for k, v in figures.items() if v is not None})
        return found


def record(ctx: Context) -> TuneResult | None:
    """The run's tuning record, or None (not tuned, an older or unreadable report)."""
    tuning = ctx.m.get("tuning")
    if not isinstance(tuning, Mapping):
        return None
    try:
        result = TuneResult.from_dict(tuning)
    except (KeyError, TypeError, ValueError):
        return None
    return result if result.trials else None


def chose(ctx: Context, option: Option) -> bool:
    """True when the run was tuned and kept a candidate with `option` on."""
    result = record(ctx)
    return bool(
        result
        and result.decision == "tuned"
        and any(t.status == "chosen" and option(t.settings) for t in result.trials)
    )


def trial(ctx: Context, option: Option) -> Compared | None:
    """The candidate that turned `option` on, compared with the baseline.

    Prefers a candidate that differs from the baseline in `option` alone (its
    figure is that option's own effect), then the fastest one timed, then one
    that failed (its reason is worth telling). None when no candidate turned it on.

    Example:
        >>> tuning = {"decision": "tuned", "compile": False, "candidates": [
        ...     {"name": "eager", "status": "baseline", "step_seconds": 0.03,
        ...      "settings": {"compile": False}},
        ...     {"name": "compile", "status": "slower", "step_seconds": 0.04,
        ...      "settings": {"compile": True}}]}
        >>> round(trial(Context.build(None, None, {"tuning": tuning}), COMPILE).speedup, 2)
        0.75
    """
    result = record(ctx)
    if result is None:
        return None
    base = result.baseline
    found = [t for t in result.trials[1:] if option(t.settings)]
    if not found:
        return None

    def others(settings: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in settings.items() if k not in option.keys}

    def alone(t: Trial) -> bool:
        return bool(base.settings) and others(t.settings) == others(base.settings)

    def seconds(t: Trial) -> float:
        return t.step_seconds or math.inf  # timed ones only: never the default

    timed = [t for t in found if t.step_seconds]
    best = (
        min((t for t in timed if alone(t)), key=seconds, default=None)
        or min(timed, key=seconds, default=None)
        or found[0]
    )
    fields = {f.name: getattr(best, f.name) for f in dataclasses.fields(Trial)}
    return Compared(
        **fields, baseline_seconds=base.step_seconds, over_baseline=result.speedup_of(best)
    )


def why_not_timed(
    evidence: dict[str, Any], result: TuneResult | None, trial: Compared | None, lever: str
) -> str:
    """Why tune's record has no timed trial of `lever` (``"SDPA"``, ``"float8"``): its
    turn came after the data ended (`trial` queued, not timed), tune did not run, did
    not tune, or its record has none; `evidence` gets what the record says."""
    if trial is not None:
        return f"tune did not time {lever} ({trial.why or trial.status})"
    if result is None:
        evidence["tune"] = "not run"
        return "tune did not run"
    evidence["tune.decision"] = result.decision
    if result.decision != "tuned":
        return f"tune did not try {lever} ({result.decision})"
    return f"tune's record has no {lever} trial (its steps ended first, or an older accelkit)"


def why_dropped(trial: Compared, against: str) -> str:
    """Why tune dropped `trial`: its failed check against `against` (``"the bf16 step"``)
    with the figures, else the error it recorded."""
    check = trial.check
    if check is not None and check.failed:
        return f"its {check.failed} check against {against}: {check.describe()}"
    return trial.why or "it failed"
