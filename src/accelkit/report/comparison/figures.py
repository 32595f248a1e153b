"""The figures of two runs side by side, each with its windows' spread and a verdict.

The noise rule. A run's figure is its steady state as a whole; ``report.series`` holds
the same figure per window of steps (`accelkit.profiling.clock`: step time, samples/s,
input wait; NVML ticks for GPU busy, memory, power and clock). The figures that follow
one of those columns (tokens/s and samples/s of all devices with samples/s; achieved
FLOP/s and MFU inversely with step time, FLOPs per step being fixed within a run) take
its windows scaled to them. A run's *range* is its lowest and highest window, its own
figure included; its *spread* is how far the range strays from the figure, relative
(`accelkit.report.comparison.types.spread`). NEW differs from BASE *within noise* when

1. the two ranges overlap: some window of one run is as fast as some window of the
   other, so the runs' own variation covers the difference; or
2. the change, ``new / base - 1``, is no larger than the larger of the two spreads.

Otherwise NEW is faster or slower (higher or lower, for figures that are not a speed).
It is the rule `pytest-benchmark compare` leaves to the reader and tune applies to its
paired timings (`accelkit.torch.tuning.trials.clearly_faster`: every pair the same way):
a difference counts only where no window of the runs themselves could explain it. A
run with fewer than two windows of a figure has no range: its figure stands alone,
with spread 0, and the comparison says its noise is unknown.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from accelkit.profiling.run_report import RunReport
from accelkit.report.comparison.types import FigureComparison, Verdict, spread

INPUT_WAIT = "input_wait_share"  # per window: input_wait_s / step_time_s


@dataclasses.dataclass(frozen=True)
class Figure:
    """A compared figure: its `RunReport` field, how people call it, which way is
    faster, and the series column whose windows give its spread.

    Attributes:
        speed: 1 where higher is faster, -1 where lower is faster, 0 for a figure that
            is not a speed (memory, power, a share): higher or lower.
        column: the ``report.series`` column it follows, None where it has none.
        power: 1 where the figure is proportional to the column, -1 inversely.
        unit: how it is written (`accelkit.report.comparison.text`).
    """

    name: str
    label: str
    speed: int
    column: str | None
    power: int
    unit: str


FIGURES = (
    Figure("step_time_s", "step time", -1, "step_time_s", 1, "seconds"),
    Figure("samples_per_second", "samples/s", 1, "samples_per_second", 1, "rate"),
    Figure(
        "global_samples_per_second", "samples/s, all devices", 1, "samples_per_second", 1, "rate"
    ),
    Figure("tokens_per_second", "tokens/s", 1, "samples_per_second", 1, "rate"),
    Figure(
        "real_tokens_per_second", "tokens/s without padding", 1, "samples_per_second", 1, "rate"
    ),
    Figure("achieved_tflops", "achieved FLOP/s", 1, "step_time_s", -1, "tflops"),
    Figure("mfu", "MFU", 1, "step_time_s", -1, "share"),
    Figure("input_wait_share", "input wait", 0, INPUT_WAIT, 1, "share"),
    Figure("communication_share", "all-reduce wait", 0, None, 1, "share"),
    Figure("evaluation_share", "evaluation share", 0, None, 1, "share"),
    Figure("peak_memory_bytes", "peak memory", 0, None, 1, "bytes"),
    Figure("gpu_memory_used_bytes", "GPU memory used", 0, "gpu_memory_used_bytes", 1, "bytes"),
    Figure("gpu_utilization", "GPU busy", 0, "gpu_utilization", 1, "percent"),
    Figure("power_w", "GPU power", 0, "power_w", 1, "watts"),
    Figure("sm_clock_mhz", "SM clock", 0, "sm_clock_mhz", 1, "mhz"),
)
BY_NAME = {figure.name: figure for figure in FIGURES}


def compare_figures(base: RunReport, new: RunReport) -> tuple[FigureComparison, ...]:
    """Every figure of `FIGURES` that either run measured, side by side."""
    return tuple(
        compare_figure(figure, base, new)
        for figure in FIGURES
        if _value(base, figure.name) is not None or _value(new, figure.name) is not None
    )


def compare_figure(figure: Figure, base: RunReport, new: RunReport) -> FigureComparison:
    """`figure` in both runs, with their windows' ranges and the verdict."""
    b, n = _value(base, figure.name), _value(new, figure.name)
    b_range, n_range = window_range(base, figure), window_range(new, figure)
    missing = [
        f"not measured in {role}"
        + (f": {run.notes[figure.name]}" if figure.name in run.notes else "")
        for role, run, value in (("BASE", base, b), ("NEW", new, n))
        if value is None
    ]
    if b is None or n is None:
        return FigureComparison(
            figure.name,
            figure.label,
            b,
            n,
            b_range,
            n_range,
            None,
            Verdict.NOT_COMPARED,
            "; ".join(missing),
        )
    found, why = verdict(figure, b, n, b_range, n_range)
    change = n / b - 1 if b != 0 else None
    return FigureComparison(figure.name, figure.label, b, n, b_range, n_range, change, found, why)


def verdict(
    figure: Figure,
    base: float,
    new: float,
    base_range: tuple[float, float] | None,
    new_range: tuple[float, float] | None,
) -> tuple[Verdict, str]:
    """The verdict on NEW's `figure` against BASE's by the noise rule of this module,
    and what it rests on.

    Example:
        >>> step = BY_NAME["step_time_s"]
        >>> verdict(step, 0.100, 0.104, (0.098, 0.103), (0.101, 0.106))
        (<Verdict.WITHIN_NOISE: 'within noise'>, 'the windows of the two runs overlap')
        >>> verdict(step, 0.100, 0.120, (0.099, 0.101), (0.119, 0.122))[0]
        <Verdict.SLOWER: 'slower'>
    """
    if base == new:
        return Verdict.WITHIN_NOISE, "the same"
    b_low, b_high = base_range or (base, base)
    n_low, n_high = new_range or (new, new)
    if b_low <= n_high and n_low <= b_high:
        return Verdict.WITHIN_NOISE, "the windows of the two runs overlap"
    noise = max(spread(base, base_range) or 0.0, spread(new, new_range) or 0.0)
    change = new / base - 1 if base != 0 else math.inf
    if abs(change) <= noise:
        return Verdict.WITHIN_NOISE, f"{change:+.1%} is within the windows' spread ±{noise:.1%}"
    up = new > base
    if figure.speed == 0:
        found = Verdict.HIGHER if up else Verdict.LOWER
    else:
        found = Verdict.FASTER if up == (figure.speed > 0) else Verdict.SLOWER
    return found, f"beyond the windows' spread ±{noise:.1%}"


def window_range(run: RunReport, figure: Figure) -> tuple[float, float] | None:
    """``(lowest, highest)`` of `figure` over the run's windows, its own value included;
    None with fewer than two windows of it (or without the figure)."""
    value = _value(run, figure.name)
    windows = window_values(run, figure)
    if value is None or len(windows) < 2:
        return None
    return min(*windows, value), max(*windows, value)


def window_values(run: RunReport, figure: Figure) -> list[float]:
    """`figure` in each of the run's windows (``report.series``), scaled from the column
    it follows; [] where the run kept no such column."""
    if figure.column is None:
        return []
    if figure.column == INPUT_WAIT:
        waits, steps = run.series.get("input_wait_s", []), run.series.get("step_time_s", [])
        pairs = [(_number(w), _number(s)) for w, s in zip(waits, steps, strict=False)]
        return [w / s for w, s in pairs if w is not None and s is not None and s > 0]
    values = [v for v in map(_number, run.series.get(figure.column, [])) if v is not None]
    if figure.column == figure.name:
        return values
    value, own = _value(run, figure.name), _value(run, figure.column)
    if value is None or not own:
        return []
    return [value * (v / own) ** figure.power for v in values if v or figure.power > 0]


def _value(run: RunReport, name: str) -> float | None:
    return _number(getattr(run, name, None))


def _number(value: object) -> float | None:
    """`value` as a finite float; None for None, NaN, infinity and what is no number."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def unknown_noise(run: RunReport, role: str, names: Sequence[str] = ("step_time_s",)) -> list[str]:
    """Caveats for the figures among `names` that the run measured with fewer than two
    windows: their noise is unknown, so any difference counts."""
    return [
        f"{role} has fewer than two windows of {BY_NAME[name].label}: its noise is unknown, "
        "so any difference in it counts (a longer run has more windows)"
        for name in names
        if _value(run, name) is not None and window_range(run, BY_NAME[name]) is None
    ]
