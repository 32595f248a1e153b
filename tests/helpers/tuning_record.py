"""What a tune record says its trials took, for tests that check it against the steps
trained: a later candidate's units are its warm-up and two a pair (4 pairs, or 8 where
its rounds ran again, `accelkit.torch.tuning.trials.more_rounds`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from accelkit.torch.tuning import trials


def units(candidate: Mapping[str, Any] | trials.Trial) -> int:
    """The units a later candidate, timed in pairs, trained: its record's own count."""
    record = candidate.to_dict() if isinstance(candidate, trials.Trial) else candidate
    pairs = record["paired_ratios"]
    assert len(pairs) in (trials.PAIRS, 2 * trials.PAIRS), record
    return trials.WARMUP_UNITS + 2 * len(pairs)


def taken(candidates: Iterable[Mapping[str, Any] | trials.Trial]) -> int:
    """The steps all of `candidates` trained (skipped ones: none)."""
    records = [c.to_dict() if isinstance(c, trials.Trial) else c for c in candidates]
    return sum(record["steps"] for record in records)


def graphs_trial(report: Any) -> dict[str, Any]:
    """The CUDA-graph candidate's record in a run's report."""
    return next(c for c in report.tuning["candidates"] if c["settings"].get("cudagraphs"))
