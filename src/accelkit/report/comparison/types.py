"""What a comparison of two runs holds: plain, frozen data (`accelkit.report.comparison`
fills it, `accelkit.report.comparison.text` draws it, ``--json`` writes `to_dict`)."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any


class Verdict(str, enum.Enum):
    """How NEW's figure stands against BASE's, beyond the runs' own noise or not
    (`accelkit.report.comparison.figures.verdict` gives the rule)."""

    FASTER = "faster"
    SLOWER = "slower"
    HIGHER = "higher"  # figures that are not a speed: memory, power, shares
    LOWER = "lower"
    WITHIN_NOISE = "within noise"
    NOT_COMPARED = "not compared"


@dataclasses.dataclass(frozen=True)
class Change:
    """One thing that differs between the runs' set-ups.

    Attributes:
        group: what it is part of: ``hardware``, ``software``, ``run``, ``plan``,
            ``tune``, ``shapes``, ``model``.
        name: what it is, e.g. ``driver``, ``torch``, ``cudnn_benchmark``.
        base, new: its value in each run, as text; None where the run does not say.
    """

    group: str
    name: str
    base: str | None
    new: str | None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class FigureComparison:
    """One measured figure of both runs, with the spread of each run's windows.

    Attributes:
        name: the `RunReport` field (``step_time_s``, ``mfu``).
        label: the name people read (``step time``).
        base, new: the run's figure; None where it was not measured.
        base_range, new_range: ``(lowest, highest)`` of the figure over the run's
            steady-state windows (``report.series``), its own value included; None where
            the run has fewer than two windows of it.
        change: ``new / base - 1``; None where either is missing or BASE is 0.
        verdict: `Verdict`, by the rule of `accelkit.report.comparison.figures.verdict`.
        why: what the verdict rests on, or why the figure is not compared
            (``not measured in BASE: no GPU``).
    """

    name: str
    label: str
    base: float | None
    new: float | None
    base_range: tuple[float, float] | None
    new_range: tuple[float, float] | None
    change: float | None
    verdict: Verdict
    why: str = ""

    @property
    def base_spread(self) -> float | None:
        """How far BASE's windows stray from its figure, relative (`spread`)."""
        return spread(self.base, self.base_range)

    @property
    def new_spread(self) -> float | None:
        return spread(self.new, self.new_range)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["verdict"] = self.verdict.value
        data["base_range"] = list(self.base_range) if self.base_range else None
        data["new_range"] = list(self.new_range) if self.new_range else None
        data["base_spread"], data["new_spread"] = self.base_spread, self.new_spread
        return data


@dataclasses.dataclass(frozen=True)
class AdviceChange:
    """A piece of advice given for one run and not the other."""

    id: str
    title: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Comparison:
    """Two runs side by side: what differs in their set-up, what it did to the
    figures, the advice that appeared or went away, and what could not be compared.

    Attributes:
        base, new: what the runs are called (the file, or the model and framework).
        changes: what differs (`Change`), set-up only: figures are in `figures`.
        figures: every figure either run measured (`FigureComparison`).
        advice_appeared, advice_gone: advice for NEW and not BASE, and the reverse.
        caveats: what cannot be compared, and why (a different framework, GPU or
            schema; a run without windows, whose noise is unknown).
    """

    base: str
    new: str
    changes: tuple[Change, ...]
    figures: tuple[FigureComparison, ...]
    advice_appeared: tuple[AdviceChange, ...] = ()
    advice_gone: tuple[AdviceChange, ...] = ()
    caveats: tuple[str, ...] = ()

    def figure(self, name: str) -> FigureComparison | None:
        """The comparison of the figure `name` (a `RunReport` field), or None."""
        return next((f for f in self.figures if f.name == name), None)

    def slower_by_more_than(self, share: float) -> bool:
        """Whether NEW's step time is slower than BASE's beyond the noise and by more
        than `share` (0.05: 5%): the regression ``--fail-if-slower`` guards against.

        Example:
            >>> step = FigureComparison("step_time_s", "step time", 0.10, 0.12,
            ...     (0.099, 0.101), (0.119, 0.121), 0.2, Verdict.SLOWER)
            >>> Comparison("a", "b", (), (step,)).slower_by_more_than(0.05)
            True
        """
        step = self.figure("step_time_s")
        return (
            step is not None
            and step.verdict is Verdict.SLOWER
            and step.change is not None
            and step.change > share
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "base": self.base,
            "new": self.new,
            "changes": [c.to_dict() for c in self.changes],
            "figures": [f.to_dict() for f in self.figures],
            "advice_appeared": [a.to_dict() for a in self.advice_appeared],
            "advice_gone": [a.to_dict() for a in self.advice_gone],
            "caveats": list(self.caveats),
        }


def spread(value: float | None, bounds: tuple[float, float] | None) -> float | None:
    """How far the windows stray from the run's figure: the largest distance from
    `value` to an end of `bounds`, relative to `value`; None without both or at 0.

    Example:
        >>> spread(10.0, (9.5, 11.0))
        0.1
    """
    if value is None or bounds is None or value == 0:
        return None
    return max(abs(bounds[0] - value), abs(bounds[1] - value)) / abs(value)
