"""What `tune` measured on the run's own model, as the rules read it (``report.tuning``).

`accelkit.torch.fit(..., tune=True)` times candidate settings (eager, torch.compile,
a fused optimizer...) on the user's model for a few real steps and keeps the
fastest. Its record, ``report.to_dict()["tuning"]``, is None when the run was not
tuned, else::

    {"decision": "tuned" | "not tuned: <why>", "baseline": "eager", "chosen": "compile",
     "speedup": 1.42, "seconds": 61.2, "steps": 40,
     "candidates": [{"name", "settings": {"compile": bool, "fused_optimizer": bool, ...},
                     "status": "baseline" | "chosen" | "slower" | "failed" | "skipped",
                     "step_seconds": median or None, "spread": [min, max] or None,
                     "steps", "compile_seconds", "why"}]}

A rule that can point at a measured figure uses it before any estimate: the
same model, the same run, median step times. The optimizer may also be named
``"optimizer": "fused" | "foreach" | "default"`` in a candidate's settings; both
spellings are read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from accelkit.advisor.context import Context


class Option(NamedTuple):
    """A setting `tune` can turn on: the settings keys that name it, and when it is on."""

    keys: tuple[str, ...]
    on: Callable[[Mapping[str, Any]], bool]


COMPILE = Option(("compile",), lambda s: bool(s.get("compile")))
FUSED_OPTIMIZER = Option(("fused_optimizer", "optimizer"),
                         lambda s: bool(s.get("fused_optimizer"))
                         or s.get("optimizer") in ("fused", "foreach"))


@dataclasses.dataclass(frozen=True)
class Trial:
    """A candidate measured against the baseline on the run's model.

    Attributes:
        name, status, why: the candidate's, as `tune` recorded them.
        settings: its settings, e.g. ``{"compile": True, "fused_optimizer": False}``.
        step_seconds: its median timed step; None when it was not timed (failed, skipped).
        baseline_seconds: the baseline's median step, same run.
        spread: ``[min, max]`` of its timed steps, when recorded.
        compile_seconds: time spent compiling, when it compiled.
    """

    name: str
    status: str
    why: str
    settings: Mapping[str, Any]
    step_seconds: float | None
    baseline_seconds: float | None
    spread: list[float] | None
    compile_seconds: float | None

    @property
    def speedup(self) -> float | None:
        """Baseline median step / this candidate's median step (> 1: faster)."""
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
        return found


def record(ctx: Context) -> Mapping[str, Any] | None:
    """The run's tuning record, or None (not tuned, an older report)."""
    tuning = ctx.m.get("tuning")
    return tuning if isinstance(tuning, Mapping) else None


def chose(ctx: Context, option: Option) -> bool:
    """True when the run was tuned and kept a candidate with `option` on."""
    tuning = record(ctx)
    if tuning is None or not str(tuning.get("decision", "")).startswith("tuned"):
        return False
    chosen = next((c for c in _candidates(tuning) if c.get("status") == "chosen"
                   or c.get("name") == tuning.get("chosen")), None)
    return bool(chosen and option.on(chosen.get("settings") or {}))


def trial(ctx: Context, option: Option) -> Trial | None:
    """The candidate that turned `option` on, compared with the baseline.

    Prefers a candidate that differs from the baseline in `option` alone (its
    figure is that option's own effect), then the fastest one timed, then one
    that failed (its reason is worth telling). None when no candidate turned it on.

    Example:
        >>> tuning = {"decision": "tuned", "baseline": "eager", "chosen": "eager",
        ...           "candidates": [
        ...     {"name": "eager", "status": "baseline", "step_seconds": 0.03,
        ...      "settings": {"compile": False}},
        ...     {"name": "compile", "status": "slower", "step_seconds": 0.04,
        ...      "settings": {"compile": True}}]}
        >>> round(trial(Context.build(None, None, {"tuning": tuning}), COMPILE).speedup, 2)
        0.75
    """
    tuning = record(ctx)
    if tuning is None:
        return None
    candidates = _candidates(tuning)
    base = next((c for c in candidates if c.get("status") == "baseline"), None) or next(
        (c for c in candidates if c.get("name") == tuning.get("baseline")), None)
    base_settings = dict((base or {}).get("settings") or {})
    found = [c for c in candidates if option.on(c.get("settings") or {}) and c is not base]
    if not found:
        return None

    def others(settings: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in settings.items() if k not in option.keys}

    def alone(c: Mapping[str, Any]) -> bool:
        return bool(base_settings) and others(c.get("settings") or {}) == others(base_settings)

    timed = [c for c in found if c.get("step_seconds")]
    best = (min((c for c in timed if alone(c)), key=lambda c: c["step_seconds"], default=None)
            or min(timed, key=lambda c: c["step_seconds"], default=None) or found[0])
    return Trial(name=str(best.get("name", "?")), status=str(best.get("status", "?")),
                 why=str(best.get("why") or ""), settings=dict(best.get("settings") or {}),
                 step_seconds=best.get("step_seconds"),
                 baseline_seconds=(base or {}).get("step_seconds"),
                 spread=best.get("spread"), compile_seconds=best.get("compile_seconds"))


def _candidates(tuning: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [c for c in tuning.get("candidates") or () if isinstance(c, Mapping)]
