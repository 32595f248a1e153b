"""Paired timing rounds, shared by the benchmarks that compare variants of one step in
one process (comm_hook_overhead.py, ddp_cost.py): each variant trains `steps` steps per
round, the device synchronised at both ends, in an order that rotates every round, so
a drift of the clock or the machine falls on every variant alike."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping


def rounds(
    steps_of: Mapping[str, Callable[[], None]],
    steps: int,
    repeats: int,
    sync: Callable[[], None],
    after_round: Callable[[], None] = lambda: None,
) -> dict[str, list[float]]:
    """Seconds per step of each variant, one figure per round.

    Args:
        steps_of: per variant, what runs one training step.
        steps: steps per round.
        repeats: rounds per variant.
        sync: waits for the device (both ends of each round).
        after_round: runs once the device is synchronised after each whole round.
    """
    names = list(steps_of)
    times: dict[str, list[float]] = {name: [] for name in names}
    for repeat in range(repeats):
        turn = repeat % len(names)
        for name in names[turn:] + names[:turn]:
            step = steps_of[name]
            sync()
            start = time.perf_counter()
            for _ in range(steps):
                step()
            sync()
            times[name].append((time.perf_counter() - start) / steps)
        after_round()
    return times


def medians(times: Mapping[str, list[float]]) -> dict[str, float]:
    return {name: statistics.median(values) for name, values in times.items()}


def ratios(times: Mapping[str, list[float]], to: str) -> dict[str, list[float]]:
    """Each variant's step over `to`'s, round by round: paired rounds share the
    machine's state, so their ratios spread less than the step times do."""
    return {
        name: [mine / theirs for mine, theirs in zip(values, times[to], strict=True)]
        for name, values in times.items()
    }


def summary(values: list[float]) -> tuple[float, float, float]:
    """(median, min, max)."""
    return statistics.median(values), min(values), max(values)
