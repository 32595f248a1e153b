"""The training as the HTML page draws it, from what a run report holds: the loss
points over steps, the spread of the windows' step times, MFU per window, and where
training paused (evaluation, the rest) on the run's time axis.

A report keeps no per-step times and no loss per step: `RunReport.losses` is one mean
per epoch, `eval_losses` one per evaluation, and `series` one row per steady-state
window (its end in wall seconds, its last step, its mean step time), at most 512 rows
(neighbours averaged). Everything here is derived from those, and says so: the
distribution is of the windows' means, not of single steps.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from accelkit.profiling.clock import WindowSums
from accelkit.profiling.metrics import window_figures

if TYPE_CHECKING:
    from accelkit.profiling.run_report import RunReport

PERCENTILES = (50, 95, 99)
# A window whose wall time exceeds its training time by less than this (seconds, and
# share of the window) paused for nothing worth marking: timer noise.
_MIN_PAUSE_S, _MIN_PAUSE_SHARE = 1e-3, 0.02


@dataclasses.dataclass(frozen=True)
class Losses:
    """Loss points on a step axis: each epoch's mean training loss at the step that ended
    the epoch, and each evaluation's mean loss at the step it followed."""

    train: tuple[tuple[float, float], ...]
    evaluation: tuple[tuple[float, float], ...]
    evaluations_per_epoch: bool  # one evaluation after each epoch, as the fits do


def losses(report: RunReport) -> Losses | None:
    """The report's losses placed on its steps; None when it holds none.

    Epochs are taken as equal in steps (the report keeps their count, not each one's
    length); evaluations, when one follows each epoch, at the epoch's end, else spread
    evenly over the run, the last at its end.

    Example:
        >>> from accelkit.profiling.run_report import RunReport
        >>> r = RunReport("torch", "m", "cpu", "fp32", "fp32", steps=40,
        ...               losses=[2.0, 1.5], eval_losses=[2.1, 1.7])
        >>> losses(r).train, losses(r).evaluation
        (((20.0, 2.0), (40.0, 1.5)), ((20.0, 2.1), (40.0, 1.7)))
    """
    train, evals = _finite(report.losses), _finite(report.eval_losses)
    if not train and not evals:
        return None
    steps = float(report.steps or max(len(report.losses), len(report.eval_losses)))

    def placed(values: Sequence[float | None]) -> tuple[tuple[float, float], ...]:
        count = len(values)
        return tuple((steps * (i + 1) / count, v) for i, v in enumerate(values) if v is not None)

    return Losses(
        placed(train),
        placed(evals),
        evaluations_per_epoch=len(report.eval_losses) == len(report.losses),
    )


def _finite(values: Sequence[float]) -> list[float | None]:
    """`values` with the non-finite ones (a diverged run's) as gaps; [] when none is left."""
    out: list[float | None] = [v if math.isfinite(v) else None for v in values]
    return out if any(v is not None for v in out) else []


@dataclasses.dataclass(frozen=True)
class Spread:
    """The windows' mean step times: how many, their percentiles (`PERCENTILES`) and a
    histogram (bin edges, one more than the counts)."""

    windows: int
    percentiles: dict[int, float]
    edges: tuple[float, ...]
    counts: tuple[int, ...]


def spread(step_times: Sequence[float | None]) -> Spread | None:
    """Percentiles (linear between the nearest ranks, as numpy's default) and a histogram
    of the known step times; None when none is known.

    Example:
        >>> s = spread([0.1, 0.1, 0.2, 0.1, None])
        >>> s.windows, s.percentiles[50], s.counts[0], s.counts[-1]
        (4, 0.1, 3, 1)
    """
    values = sorted(v for v in step_times if v is not None and math.isfinite(v) and v >= 0)
    if not values:
        return None
    bins = max(1, min(20, math.ceil(math.sqrt(len(values)))))
    low, high = values[0], values[-1]
    width = (high - low) / bins
    if not width > 0:  # one value (or a span too small to split): one bin around it
        bins, width = 1, (high - low) or abs(low) * 0.05 or 1.0
    edges = tuple(low + i * width for i in range(bins + 1))
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, int((v - low) / width))] += 1
    return Spread(
        len(values), {p: _percentile(values, p) for p in PERCENTILES}, edges, tuple(counts)
    )


def _percentile(ordered: Sequence[float], p: float) -> float:
    rank = (len(ordered) - 1) * p / 100
    below, above = math.floor(rank), math.ceil(rank)
    return ordered[below] + (ordered[above] - ordered[below]) * (rank - below)


def window_mfu(report: RunReport) -> tuple[str, list[float | None]] | None:
    """Per window of `report.series`, MFU (against the datasheet peak, else the measured
    one) as a share, by the one window formula (`accelkit.profiling.metrics.
    window_figures`); or, with no peak, achieved TFLOP/s. The name of what it holds
    ("mfu", "mfu_calibrated" or "achieved_tflops") and the values; None without a FLOP
    count or windows."""
    step_times = report.series.get("step_time_s") or []
    if not report.flops_per_step or not any(v for v in step_times):
        return None
    peak, name = report.peak_tflops, "mfu"
    if not peak and report.calibrated_tflops:
        peak, name = report.calibrated_tflops, "mfu_calibrated"
    out: list[float | None] = []
    for seconds in step_times:
        if not seconds or seconds <= 0:
            out.append(None)
            continue
        figures = window_figures(
            WindowSums(steps=1, seconds=seconds),
            flops_per_step=report.flops_per_step,
            peak_tflops=peak,
        )
        out.append(figures.get("mfu") if peak else figures.get("achieved_tflops"))
    return (name if peak else "achieved_tflops"), out


def pauses(series: dict[str, list[float | None]]) -> list[tuple[float, float]]:
    """Where training stopped for something else, on the run's time axis: (the end of the
    window it stopped in, seconds stopped), from each window's wall time less its
    training time (steps x mean step time). The clock stops for evaluation and the rest
    (epoch boundaries, checkpoints), so those seconds are in a window's wall time only.
    Averaged rows (a long run's) spread a pause over the stretch they cover; a pause
    after the last window or before the first is not seen.

    Example:
        >>> pauses({"time_s": [1.0, 2.0, 5.0], "step": [10.0, 20.0, 30.0],
        ...         "step_time_s": [0.1, 0.1, 0.1]})
        [(5.0, 2.0)]
    """
    rows = zip(
        series.get("time_s") or [],
        series.get("step") or [],
        series.get("step_time_s") or [],
        strict=False,
    )
    known = [(t, s, d) for t, s, d in rows if t is not None and s is not None and d is not None]
    found = []
    for (t0, s0, _), (t1, s1, per_step) in itertools.pairwise(known):
        wall = t1 - t0
        stopped = wall - (s1 - s0) * per_step
        if stopped > _MIN_PAUSE_S and stopped > _MIN_PAUSE_SHARE * wall:
            found.append((float(t1), float(stopped)))
    return found
