"""The curves of two runs overlaid, as the comparison's HTML page draws them: the loss
over the steps, and per steady-state window the throughput, the step time and MFU.

Each run's series is derived as the single-run page derives it (`accelkit.report.
training`: the loss points placed on the steps, MFU per window by the one window
formula); windows are placed at their last step (``series["step"]``), so two runs of
different speeds line up step for step. A series one run lacks is drawn for the other
alone, and the reason it is missing is kept to be said on the page.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from accelkit.profiling.metrics import label as _label
from accelkit.report import svg, training

if TYPE_CHECKING:
    from accelkit.profiling.run_report import RunReport

ROLES = ("BASE", "NEW")  # the legend's names, in `svg.COLORS` order: BASE blue, NEW orange
Points = tuple[tuple[float, float], ...]
# Every chart of the comparison page, in order; one neither run has data for says why.
CHARTS = (
    "chart-compare-loss",
    "chart-compare-eval-loss",
    "chart-compare-throughput",
    "chart-compare-step-time",
    "chart-compare-mfu",
)


@dataclasses.dataclass(frozen=True)
class Curve:
    """One run's series on a step axis, or why it has none.

    Attributes:
        points: (step, value) pairs in the run's unit (seconds, samples/s, a share).
        why: why the run has no such series; "" where it has one.
        kind: what the values are, where a run may hold one of several (``mfu``,
            ``mfu_calibrated``, ``achieved_tflops``); "" otherwise.
    """

    points: Points = ()
    why: str = ""
    kind: str = ""


@dataclasses.dataclass(frozen=True)
class Overlay:
    """A chart of both runs.

    Attributes:
        chart_id: the svg element's id (one of `CHARTS`).
        series: what it draws, as the page names it (``training loss``).
        y_label: the y axis' label, with its unit.
        scale: the factor from the runs' unit to the axis' (1000 for seconds in ms).
        curves: each run's `Curve`, BASE first.
        caption: what the chart shows and how it is derived.
    """

    chart_id: str
    series: str
    y_label: str
    scale: float
    curves: tuple[Curve, Curve]
    caption: str

    @property
    def missing(self) -> list[tuple[str, str]]:
        """(role, why) for each run that lacks the series: ``("NEW", "it did not
        evaluate")``."""
        return [(role, c.why) for role, c in zip(ROLES, self.curves, strict=True) if c.why]


def _why(report: RunReport, *fields: str, default: str) -> str:
    return next((report.notes[f] for f in fields if f in report.notes), default)


def train_loss(report: RunReport) -> Curve:
    """Each epoch's mean training loss at the step that ended it (`training.losses`)."""
    found = training.losses(report)
    if found is None or not found.train:
        return Curve(
            why=_why(
                report,
                "losses",
                default="no loss recorded (a loop that does not hand accelkit its loss, or "
                "a report saved before accelkit kept the losses)",
            )
        )
    return Curve(found.train)


def eval_loss(report: RunReport) -> Curve:
    """Each evaluation's mean loss at the step it followed (`training.losses`)."""
    found = training.losses(report)
    if found is not None and found.evaluation:
        return Curve(found.evaluation)
    if report.evaluation_seconds:
        return Curve(why="it evaluated, but its evaluation losses were not recorded")
    return Curve(why="it did not evaluate")


def window_column(column: str) -> Callable[[RunReport], Curve]:
    """The series column `column` per window, at each window's last step."""

    def curve(report: RunReport) -> Curve:
        return _on_steps(
            report,
            report.series.get(column) or [],
            _why(report, column, default="no steady-state window measured"),
        )

    return curve


def window_mfu(report: RunReport) -> Curve:
    """MFU per window (`training.window_mfu`: against the datasheet peak, else the
    measured one; achieved TFLOP/s without either)."""
    found = training.window_mfu(report)
    why = _why(report, "flops_per_step", "achieved_tflops", default="no FLOPs counted")
    if found is None:
        return Curve(why=why)
    kind, values = found
    return dataclasses.replace(_on_steps(report, values, why), kind=kind)


def _on_steps(report: RunReport, values: Sequence[float | None], why: str) -> Curve:
    steps = report.series.get("step") or []
    points = tuple(
        (float(s), float(v))
        for s, v in zip(steps, values, strict=False)
        if s is not None and v is not None
    )
    if points:
        return Curve(points)
    if values and not steps:
        return Curve(why="its windows have no step numbers (a report saved before they were)")
    return Curve(why=why)


def overlays(base: RunReport, new: RunReport) -> list[Overlay]:
    """Every chart of both runs the comparison page draws, in order (`CHARTS`)."""
    return [
        Overlay(
            "chart-compare-loss",
            "training loss",
            "loss",
            1.0,
            (train_loss(base), train_loss(new)),
            "Mean training loss of each epoch, at the step that ended it (epochs taken as "
            "equal in steps: a report keeps a mean per epoch, not a loss per step).",
        ),
        Overlay(
            "chart-compare-eval-loss",
            "evaluation loss",
            "loss",
            1.0,
            (eval_loss(base), eval_loss(new)),
            "Mean loss of each evaluation, at the step it followed.",
        ),
        Overlay(
            "chart-compare-throughput",
            "samples/s per window",
            _label("samples_per_second"),
            1.0,
            (window_column("samples_per_second")(base), window_column("samples_per_second")(new)),
            "Samples per second of each steady-state window, at the window's last step.",
        ),
        _step_time(base, new),
        _mfu(base, new),
    ]


def _step_time(base: RunReport, new: RunReport) -> Overlay:
    curves = (window_column("step_time_s")(base), window_column("step_time_s")(new))
    top = max((v for c in curves for _, v in c.points), default=0.0)
    # seconds where a step takes one or more (a CPU's), else milliseconds, as the run page
    scale, unit = (1.0, "s") if top >= 1 else (1e3, "ms")
    return Overlay(
        "chart-compare-step-time",
        "step time per window",
        f"{unit} per step",
        scale,
        curves,
        f"Mean step time of each steady-state window ({unit}), at the window's last step: "
        "the report keeps each window's mean, not each step's.",
    )


_PERCENT = {"mfu", "mfu_calibrated"}


def _mfu(base: RunReport, new: RunReport) -> Overlay:
    """MFU per window of both runs in percent; achieved FLOP/s where neither has a peak.
    A run with only achieved FLOP/s beside one with MFU is not drawn: the units differ."""
    curves = [window_mfu(base), window_mfu(new)]
    kinds = {c.kind for c in curves if c.points}
    if kinds & _PERCENT:
        curves = [
            c
            if c.kind in _PERCENT or not c.points
            else Curve(why="no peak to take MFU against (its achieved FLOP/s only)")
            for c in curves
        ]
        peaks = " and ".join(
            f"{role} against {'the datasheet' if c.kind == 'mfu' else 'the measured'} peak"
            for role, c in zip(ROLES, curves, strict=True)
            if c.points
        )
        scale, y_label, what = 100.0, "MFU (%)", f"MFU of each window, {peaks}"
        series = "MFU per window"
    else:
        top = max((v for c in curves for _, v in c.points), default=0.0)
        scale, y_label = (1.0, "TFLOP/s") if top >= 1 else (1e3, "GFLOP/s")
        what = f"Achieved {y_label} of each window: no peak to take MFU against"
        series = "achieved FLOP/s per window"
    return Overlay(
        "chart-compare-mfu",
        series,
        y_label,
        scale,
        (curves[0], curves[1]),
        f"{what} (FLOPs per step / the window's step time), at the window's last step.",
    )


def draw(overlay: Overlay) -> str | None:
    """The chart of `overlay`: BASE and NEW over the union of their steps, each line
    through its own points, named in the legend (``(none)`` for a run without the
    series); None when neither run has it."""
    if not any(c.points for c in overlay.curves):
        return None
    xs = sorted({x for c in overlay.curves for x, _ in c.points})
    lines = []
    for role, curve in zip(ROLES, overlay.curves, strict=True):
        by_step = dict(curve.points)
        values = [by_step.get(x) for x in xs]
        lines.append(
            (
                role if curve.points else f"{role} (none)",
                [None if v is None else v * overlay.scale for v in values],
            )
        )
    return svg.line_chart(
        overlay.chart_id,
        f"{overlay.series}: BASE and NEW",
        xs,
        lines,
        x_label="step",
        y_label=overlay.y_label,
        dots=max(len(c.points) for c in overlay.curves) <= 16,  # a few points: show each
    )
