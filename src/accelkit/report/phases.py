"""A run's wall time by phase, as the text table and the HTML chart show it.

`accelkit.profiling.assemble` splits the run's wall time (`RunReport.run_seconds`) into
training steps, evaluation and the rest (epoch boundaries, checkpoints, other
callbacks); every training figure comes from the training steps alone. This module
reads those fields back as a list, leaving out what a report does not hold: a report
saved before the phases were measured has none, and shows none.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

from accelkit.profiling.clock import EVALUATION, OTHER

if TYPE_CHECKING:
    from accelkit.profiling.run_report import RunReport

TRAINING = "training"
# (phase, the RunReport field of its seconds), in the order a run's time is told
FIELDS = (
    (TRAINING, "training_seconds"),
    (EVALUATION, "evaluation_seconds"),
    (OTHER, "other_seconds"),
)
# What a phase holds, where its name does not say it all.
MEANING = {
    TRAINING: "the training steps, warm-up included",
    OTHER: "the rest of the run (epoch boundaries, checkpoints, other callbacks)",
}


@dataclasses.dataclass(frozen=True)
class Phase:
    """One phase of a run: its name (`FIELDS`), seconds, and share of the run's wall
    time (None when the run's time is not known)."""

    name: str
    seconds: float
    share: float | None


@dataclasses.dataclass(frozen=True)
class RunTime:
    """The run's wall time (None when not recorded) and the phases that took any time."""

    seconds: float | None
    phases: tuple[Phase, ...]
    complete: bool = False  # every phase of `FIELDS` was recorded

    @property
    def whole(self) -> bool:
        """Every phase is known and the run's time too: the phases add up to it."""
        return self.seconds is not None and self.complete

    @property
    def total(self) -> float:
        """The seconds a chart spans: the run's, or the phases' sum when larger or unknown."""
        return max(self.seconds or 0.0, sum(p.seconds for p in self.phases))


def _seconds(value: object) -> float | None:
    """A recorded duration: a finite number of at least 0, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def run_time(report: RunReport) -> RunTime | None:
    """The run's wall time and its phases; None for a report that holds neither the run's
    time nor a phase that took any.

    Phases of 0 seconds (a run that did not evaluate) are left out; a negative or
    non-finite figure (a damaged file) is read as unknown.

    Example:
        >>> from accelkit.profiling.run_report import RunReport
        >>> report = RunReport("torch", "m", "cpu", "fp32", "fp32", run_seconds=10.0,
        ...                    training_seconds=8.0, evaluation_seconds=2.0, other_seconds=0.0)
        >>> [(p.name, p.seconds, p.share) for p in run_time(report).phases]
        [('training', 8.0, 0.8), ('evaluation', 2.0, 0.2)]
    """
    run = _seconds(report.run_seconds)
    known = [(name, _seconds(getattr(report, field))) for name, field in FIELDS]
    # Shares of the run; of the phases' sum where a damaged file has them exceed it.
    whole = max(run or 0.0, sum(seconds or 0.0 for _, seconds in known))
    phases = tuple(
        Phase(name, seconds, seconds / whole if run else None)
        for name, seconds in known
        if seconds  # neither unknown nor 0
    )
    if run is None and not phases:
        return None
    return RunTime(run, phases, complete=all(s is not None for _, s in known))


def describe(time: RunTime) -> str:
    """The run's time in one line: ``120.0 s = training 80.1 s (67%), evaluation 30.2 s
    (25%), other 9.7 s (8%)``; "of which" instead of "=" when a phase is not known."""
    # a phase that rounds to 0.0 s and 0% (the rest of a run without epochs) tells nothing
    shown = [p for p in time.phases if p.seconds >= 0.05 or (p.share or 0) >= 0.005]
    parts = ", ".join(
        f"{p.name} {p.seconds:,.1f} s" + (f" ({p.share:.0%})" if p.share is not None else "")
        for p in shown or time.phases
    )
    if time.seconds is None:
        return parts
    run = f"{time.seconds:,.1f} s"
    if not parts:
        return run
    return f"{run} {'=' if time.whole else 'of which'} {parts}"
