"""`Advice`: one verdict of the advisor, with its evidence, action and expected gain."""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Iterable, Mapping
from typing import Any


class Severity(str, enum.Enum):
    """How much a verdict matters: `critical` (training is wrong or about to fail),
    `warning` (a large, measured loss of speed or a risk), `info` (worth knowing)."""

    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"

    def __str__(self) -> str:
        return self.value


_WEIGHT = {Severity.INFO: 0, Severity.WARNING: 1, Severity.CRITICAL: 2}


@dataclasses.dataclass(frozen=True)
class Advice:
    """One verdict: what was found, the numbers it rests on, what to change.

    Attributes:
        id: stable identifier of the rule that fired, e.g. ``"input_bound"``.
        severity: `Severity`.
        title: the verdict in one line, with its key number.
        evidence: the measured or datasheet figures the verdict rests on, by name.
        action: the change to make, as code or a setting for the run's framework.
        expected_gain: the estimated benefit and how it was estimated, or None
            where the numbers at hand do not allow an estimate.
        speedup: the estimated step-time speed-up (``1.54`` means 1.54x faster), used
            for ranking; None when not estimated.

    Example:
        >>> a = Advice("input_bound", Severity.WARNING, "35% of step time waits for input",
        ...            {"input_wait_share": 0.35}, "DataLoader(num_workers=8)",
        ...            "up to 1.54x: 1 / (1 - 0.35)", 1.54)
        >>> a.to_dict()["severity"]
        'warning'
    """

    id: str
    severity: Severity
    title: str
    evidence: Mapping[str, Any]
    action: str
    expected_gain: str | None = None
    speedup: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "severity": self.severity.value,
            "title": self.title,
            "evidence": dict(self.evidence),
            "action": self.action,
            "expected_gain": self.expected_gain,
            "speedup": self.speedup,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Advice:
        return cls(
            id=data["id"],
            severity=Severity(data.get("severity", "info")),
            title=data.get("title", ""),
            evidence=dict(data.get("evidence") or {}),
            action=data.get("action", ""),
            expected_gain=data.get("expected_gain"),
            speedup=data.get("speedup"),
        )


def rank(items: Iterable[Advice]) -> list[Advice]:
    """Most important first.

    Critical verdicts lead (a run that trains wrong gains nothing from speed);
    then the largest estimated speed-up; then severity; verdicts without an
    estimate follow those with one. Ties keep their order (the rule registry's).
    """

    def key(a: Advice) -> tuple[Any, ...]:
        return (
            a.severity is not Severity.CRITICAL,
            a.speedup is None,
            -(a.speedup or 0.0),
            -_WEIGHT[a.severity],
        )

    return sorted(items, key=key)


# -- gain estimates shared by the rules ------------------------------------------------


def removing_share(share: float, cap: float) -> float:
    """Speed-up when a measured share of step time goes, as far as the change can take it:
    1 / (1 - share), at most `cap`.

    1 / (1 - share) is the gain of removing the share *entirely*, and it has no bound as
    the share nears 1 (0.9775 gives 44.4x), while the change that removes it has one:
    N loader workers prepare batches at most N times as fast, a doubled batch carries at
    most twice the samples per launch. Each rule passes that bound as `cap` and states
    it in its `expected_gain`. The result is finite, at least 1, at most `cap` (itself
    at least 1) and never decreases as the share grows.

    Example:
        >>> round(removing_share(0.35, cap=3.0), 2), removing_share(0.9775, cap=3.0)
        (1.54, 3.0)
    """
    if not math.isfinite(cap):
        raise ValueError(f"cap={cap!r}: a speed-up bound must be a finite number")
    cap = max(float(cap), 1.0)
    if not math.isfinite(share) or share <= 0.0:
        return 1.0
    if share >= 1.0:
        return cap
    return min(1.0 / (1.0 - share), cap)


def unbounded_gain(share: float) -> str:
    """1 / (1 - share) as text, the figure `removing_share` bounds: ``"44.44x"``, or
    ``"unbounded"`` when the share is the whole step."""
    return f"{1.0 / (1.0 - share):.2f}x" if share < 1.0 else "unbounded"


def amdahl(share: float, factor: float) -> float:
    """Speed-up when a share of step time runs `factor` times faster (Amdahl's law):
    1 / ((1 - share) + share / factor)."""
    return 1.0 / ((1.0 - share) + share / factor)


def removing_share_text(share: float, cap: float, what: str, bound: str) -> str:
    """The `expected_gain` of `removing_share(share, cap)`, one figure claimed.

    `what` names the share removed, `bound` why the change stops at `cap` (an int, a
    factor such as a doubled batch, reads "2x"; a float "3.00x"). Where the cap
    binds, the text gives the unbounded figure and the cap; where it does not, the claim
    is the share's own bound and `cap` is named as the change's reach, above it, so no
    sentence says "up to 1.06x ... at most 3.00x" of one figure.

    Example:
        >>> removing_share_text(0.057, 3.0, "the wait", "2 workers")[:60]
        'up to 1.06x: 1 / (1 - 0.057) if the wait went entirely; the '
        >>> removing_share_text(0.9, 3.0, "the wait", "2 workers")
        'up to 3.00x: 1 / (1 - 0.900) = 10.00x if the wait went entirely, at most 3.00x: 2 workers'
    """
    speedup = removing_share(share, cap)
    most = f"{cap}x" if isinstance(cap, int) else f"{cap:.2f}x"  # a count stays one: "2x"
    if share >= 1.0 or (share > 0.0 and 1.0 / (1.0 - share) > max(cap, 1.0)):
        return (
            f"up to {speedup:.2f}x: 1 / (1 - {share:.3f}) = {unbounded_gain(share)} if "
            f"{what} went entirely, at most {most}: {bound}"
        )
    return (
        f"up to {speedup:.2f}x: 1 / (1 - {share:.3f}) if {what} went entirely; the "
        f"change reaches that far ({bound}: a bound of {max(cap, 1.0):.2f} times, "
        f"not below the {speedup:.2f}x claimed)"
    )
