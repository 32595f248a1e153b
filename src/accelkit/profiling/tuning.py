"""The record of a tuning run (``report.tuning``): its candidates and what was kept.

Plain data, written by `accelkit.torch.tuning.tuner` (``accelkit.torch.fit(tune=...)``) and
read by the advisor's rules (`accelkit.advisor.tuning`): one definition for both.
``TuneResult.to_dict()`` is what a saved report holds; ``from_dict`` reads it back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any


@dataclasses.dataclass
class Trial:
    """One candidate as measured: its settings, step times and what became of it.

    Attributes:
        name: e.g. ``"eager"``, ``"eager+fused"``, ``"compile+fused"``.
        settings: ``{"compile": bool, "optimizer": "fused" | "foreach" | "default"}``,
            and under DDP ``"compression"``, ``"bucket_cap_mb"``, ``"static_graph"``,
            ``"broadcast_buffers"``.
        status: ``"baseline"``, ``"chosen"``, ``"slower"``, ``"failed"`` or ``"skipped"``.
        step_seconds: median of the timed optimizer steps (None: not timed).
        spread: ``[min, max]`` of the timed steps.
        steps: training steps (batches) the candidate trained on.
        compile_seconds: the first compiled step less the steady step time.
        why: the reason for the status, in words.
    """

    name: str
    settings: dict[str, Any]
    status: str = "skipped"
    step_seconds: float | None = None
    spread: list[float] | None = None
    steps: int = 0
    compile_seconds: float | None = None
    why: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class TuneResult:
    """What `tune` measured and kept.

    Attributes:
        decision: ``"tuned"`` or ``"not tuned: <why>"``.
        trials: every candidate, in the order tried.
        compile: whether the kept step is compiled.
        optimizer: the optimizer implementation kept: ``"fused"``, ``"foreach"`` or
            ``"default"`` (the optimizer object itself was switched in place).
        seconds: wall time of all trials, compilation included.
        steps: training steps the trials took (real steps of the run).
        ddp: the DDP options kept (``compression``, ``bucket_cap_mb``, ``static_graph``,
            ``broadcast_buffers``; `accelkit.torch.tuning.levers`); empty without DDP.
    """

    decision: str
    trials: tuple[Trial, ...]
    compile: bool
    optimizer: str
    seconds: float
    steps: int
    ddp: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def baseline(self) -> Trial:
        """The candidate with the plan's settings (the first tried)."""
        return next((t for t in self.trials if t.status == "baseline"), self.trials[0])

    @property
    def chosen(self) -> Trial:
        return next((t for t in self.trials if t.status == "chosen"), self.trials[0])

    @property
    def speedup(self) -> float | None:
        """The kept candidate's median step against the baseline's (1.0: baseline kept)."""
        base, best = self.baseline.step_seconds, self.chosen.step_seconds
        return round(base / best, 3) if base and best else None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TuneResult:
        """The result `to_dict` gave (``report.tuning``)."""
        fields = {f.name for f in dataclasses.fields(Trial)}
        trials = tuple(
            Trial(**{k: v for k, v in t.items() if k in fields}) for t in data.get("candidates", ())
        )
        return cls(
            decision=str(data.get("decision", "")),
            trials=trials,
            compile=bool(data.get("compile")),
            optimizer=data.get("optimizer", "default"),
            seconds=float(data.get("seconds", 0.0)),
            steps=int(data.get("steps", 0)),
            ddp=dict(data.get("ddp") or {}),
        )

    def to_dict(self) -> dict[str, Any]:
        """The ``report.tuning`` mapping."""
        return {
            "decision": self.decision,
            "baseline": self.baseline.name,
            "chosen": self.chosen.name,
            "speedup": self.speedup,
            "seconds": round(self.seconds, 3),
            "steps": self.steps,
            "compile": self.compile,
            "optimizer": self.optimizer,
            "ddp": dict(self.ddp),
            "candidates": [t.to_dict() for t in self.trials],
        }


def summary(result: TuneResult) -> str:
    """One line: what was kept, how much faster, what the trials cost."""
    if result.decision != "tuned":
        return result.decision
    speedup = f"{result.speedup:.2f}x" if result.speedup else "?"
    return (
        f"kept {result.chosen.name} ({speedup} {result.baseline.name}) after "
        f"{result.steps} steps, {result.seconds:.1f} s"
    )
