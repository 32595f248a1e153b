"""A run report as one self-contained HTML page: inline SVG charts, the figures, the
plan and the advice. No script, no stylesheet or font from the network: the file
opens the same offline, attached to an issue or copied off a cluster.

A leaf, like `render`: ``accelkit report RUN.json --html FILE`` writes what
`render_html` returns.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from accelkit.profiling.clock import EVALUATION, OTHER
from accelkit.profiling.metrics import label as _label
from accelkit.report import svg, training
from accelkit.report.phases import MEANING, TRAINING, describe, run_time
from accelkit.report.render import (
    describe_hardware,
    evidence_line,
    mfu_label,
    precision,
    recomputation,
    render_tuning,
    run_notes,
    run_rows,
    unmeasured,
)
from accelkit.report.text import DEFAULT_WIDTH
from accelkit.utils import units

if TYPE_CHECKING:
    from accelkit.profiling.run_report import RunReport

# Every chart the page has, in order; one without data says why in its place.
CHARTS = (
    "chart-phases",
    "chart-loss",
    "chart-throughput",
    "chart-step-breakdown",
    "chart-step-spread",
    "chart-mfu",
    "chart-mfu-time",
    "chart-gpu-utilization",
    "chart-gpu-power",
    "chart-gpu-memory",
)

_STYLE = """
* { box-sizing: border-box; }
body { font: 15px/1.5 system-ui, sans-serif; margin: 0 auto; padding: 1.5em 1em 3em;
  max-width: 62em; color: #222; background: #fff; }
h1 { font-size: 1.5em; margin: 0 0 .2em; } h2 { font-size: 1.2em; margin: 1.8em 0 .5em; }
.sub { color: #555; margin: 0 0 1.2em; overflow-wrap: anywhere; }
.headline { display: flex; flex-wrap: wrap; gap: .6em; margin: 1em 0; }
.card { flex: 1 1 9em; border: 1px solid #ddd; border-radius: 6px; padding: .5em .8em; }
.card .value { font-size: 1.45em; font-weight: 600; white-space: nowrap; }
.card .name { color: #555; font-size: .85em; } .card .more { color: #555; font-size: .8em; }
table { border-collapse: collapse; width: 100%; } td, th { padding: .3em .6em;
  text-align: left; vertical-align: top; border-bottom: 1px solid #ddd;
  overflow-wrap: anywhere; }
th { font-weight: 600; } td:first-child { white-space: nowrap; }
svg.chart { display: block; width: 100%; height: auto; max-width: 720px; }
.axis { stroke: #888; }
figure { margin: 1em 0; } figcaption { color: #444; max-width: 48em; }
.empty { color: #555; } ul.notes li { margin: .2em 0; overflow-wrap: anywhere; }
pre { background: #f6f6f6; padding: .6em; white-space: pre-wrap; overflow-wrap: anywhere; }
"""


def render_html(report: RunReport) -> str:
    """The whole page for `report`: a row of the figures that matter, the charts with
    their captions, every figure, the plan and the advice.

    Example:
        >>> page = render_html(report)  # doctest: +SKIP
        >>> open("report.html", "w").write(page)  # doctest: +SKIP
    """
    r = report
    esc = html.escape
    title = f"accelkit run: {r.model} on {r.device}"
    sections = [
        f"<h1>{esc(title)}</h1>",
        (
            f'<p class="sub">{esc(r.framework)}, precision {esc(r.precision)} (matmuls '
            f"{esc(r.matmul_dtype)}), {r.steps} steps ({r.warmup_steps} warm-up); "
            f"{esc(_hardware(r.hardware))}</p>"
        ),
        _headline(r),
        "<h2>Run time</h2>",
        _phases(r),
        "<h2>Loss</h2>",
        _loss(r),
        "<h2>Throughput</h2>",
        _throughput(r),
        "<h2>Step time</h2>",
        _breakdown(r),
        _spread(r),
        "<h2>Model FLOPs utilisation</h2>",
        _mfu(r),
        _mfu_time(r),
        "<h2>GPU</h2>",
        *_gpu(r),
        "<h2>Figures</h2>",
        _figures(r),
        "<h2>Plan</h2>",
        _plan(r.plan),
        "<h2>Advice</h2>",
        _advice(r.advice),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{esc(title)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n"
        + "\n".join(sections)
        + "\n</body>\n</html>\n"
    )


def headline(r: RunReport) -> list[tuple[str, str, str]]:
    """The figures that matter most, as (name, value, more): throughput, step time,
    MFU (with the float8 share and precision MFU beside it where float8 ran), achieved
    FLOP/s, input wait, GPU busy and peak memory; those measured only."""
    cards = []
    if r.samples_per_second:
        tokens = f"{r.tokens_per_second:,.0f} tokens/s" if r.tokens_per_second else ""
        cards.append(("throughput", f"{units.per_second(r.samples_per_second)} samples/s", tokens))
    if r.step_time_s:
        cards.append(("step time", units.duration(r.step_time_s), ""))
    if r.mfu is not None:
        cards.append((mfu_label(r), f"{r.mfu:.1%}", "of the datasheet peak"))
    elif r.mfu_calibrated is not None:
        cards.append((_label("mfu"), f"{r.mfu_calibrated:.1%}", "of the measured peak"))
    if r.float8_share is not None:
        cards.append((_label("float8_share"), f"{r.float8_share:.1%}", "of the matmul FLOPs"))
    if r.precision_mfu is not None:
        cards.append(
            (_label("precision_mfu"), f"{r.precision_mfu:.1%}", "of the peak they could reach")
        )
    if r.hfu is not None and recomputation(r) is not None:
        cards.append((_label("hfu"), f"{r.hfu:.1%}", "the recomputed forward counted"))
    if r.achieved_tflops is not None:
        cards.append(("achieved", units.flop_rate(r.achieved_tflops), ""))
    if r.input_wait_share is not None:
        cards.append((_label("input_wait_share"), f"{r.input_wait_share:.1%}", "of step time"))
    if r.gpu_utilization is not None:
        cards.append(("GPU busy", f"{r.gpu_utilization:.0f}%", "NVML, mean"))
    if r.peak_memory_bytes is not None:
        cards.append(("peak memory", units.gigabytes(r.peak_memory_bytes), "allocated"))
    return cards


def _headline(r: RunReport) -> str:
    esc = html.escape
    cards = "".join(
        f'<div class="card"><div class="name">{esc(name)}</div>'
        f'<div class="value">{esc(value)}</div><div class="more">{esc(more)}</div></div>'
        for name, value, more in headline(r)
    )
    return f'<div class="headline" id="headline">{cards}</div>' if cards else ""


def _figures(r: RunReport) -> str:
    """Every figure as the text table has it (`render.run_rows`), then what was not
    measured and why, the notes and the tuning."""
    esc = html.escape
    rows = "".join(f"<tr><td>{esc(k)}</td><td>{esc(v)}</td></tr>" for k, v in run_rows(r))
    parts = [f'<table id="figures"><tr><th>figure</th><th>value</th></tr>{rows}</table>']
    for heading, items in (("Not measured", unmeasured(r)), ("Notes", run_notes(r))):
        if items:
            entries = "".join(f"<li><strong>{esc(k)}</strong>: {esc(v)}</li>" for k, v in items)
            parts.append(f'<h3>{heading}</h3><ul class="notes">{entries}</ul>')
    if r.tuning:
        parts.append(f"<h3>Tuning</h3><pre>{esc(render_tuning(r.tuning, DEFAULT_WIDTH))}</pre>")
    return "\n".join(parts)


def _hardware(hardware: Mapping[str, Any]) -> str:
    try:
        from accelkit.hardware.info import HardwareInfo

        return describe_hardware(HardwareInfo.from_dict(hardware))
    except (KeyError, TypeError, ValueError):
        return "hardware not recorded"


def _figure(chart_id: str, chart: str | None, caption: str, why: str) -> str:
    """A chart with its caption, or, without data, the same id with the reason."""
    if chart is None:
        return (
            f'<figure id="{chart_id}-figure" class="empty"><p id="{chart_id}" '
            f'class="chart empty">No chart: {html.escape(why)}</p></figure>'
        )
    return (
        f'<figure id="{chart_id}-figure">{chart}'
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
    )


def _why(report: RunReport, *fields: str, default: str) -> str:
    return next((report.notes[f] for f in fields if f in report.notes), default)


# training in the colour of the throughput line, evaluation green, the rest grey
_PHASE_COLORS = {TRAINING: svg.COLORS[0], EVALUATION: svg.COLORS[3], OTHER: svg.COLORS[2]}


def _phases(r: RunReport) -> str:
    """The run's wall time split into training, evaluation and the rest."""
    time = run_time(r)
    chart = caption = None
    if time is not None and time.phases:
        chart = svg.parts_bar(
            "chart-phases",
            "the run's wall time by phase",
            [(p.name, p.seconds) for p in time.phases],
            unit="s",
            total=time.seconds,
            colors=[_PHASE_COLORS[p.name] for p in time.phases],
            number="{:,.1f}",  # as the caption and the text table write seconds
        )
        meanings = "".join(
            f"; {p.name}: {MEANING[p.name]}" for p in time.phases if p.name in MEANING
        )
        caption = (
            f"Wall time of the run: {describe(time)}{meanings}. The training figures on "
            "this page come from the training steps alone."
        )
    return _figure(
        "chart-phases",
        chart,
        caption or "",
        "the run's phases were not recorded (a report saved before accelkit timed "
        "evaluation and the rest apart from training)",
    )


def _throughput(r: RunReport) -> str:
    s, per_second = r.series, _label("samples_per_second")
    chart = None
    if s.get("time_s") and any(v is not None for v in s.get("samples_per_second", ())):
        chart = svg.line_chart(
            "chart-throughput",
            "samples per second over the run",
            s["time_s"],
            [(per_second, s["samples_per_second"])],
            x_label="seconds since start",
            y_label=per_second,
            **_pause_marks(r),
        )
    mean = "-" if r.samples_per_second is None else units.per_second(r.samples_per_second)
    return _figure(
        "chart-throughput",
        chart,
        f"Samples per second of each steady-state window; {mean} {per_second} over the "
        f"steady state.{_pauses_caption(r)}",
        _why(r, "samples_per_second", default="no steady-state window measured"),
    )


def breakdown(r: RunReport) -> dict[str, list[float | None]]:
    """Per window, the step time split into compute, input wait and idle (seconds).

    Input wait is measured. Of the rest, the share the GPU was busy (NVML utilisation
    over that window, else the run's mean) is compute and the remainder idle; without
    NVML samples all of the rest counts as compute.
    """
    s = r.series
    times, steps, waits = s.get("time_s", []), s.get("step_time_s", []), s.get("input_wait_s", [])
    gpu_t, gpu_u = s.get("gpu_time_s", []), s.get("gpu_utilization", [])
    wait_name = _label("input_wait_share")
    out: dict[str, list[float | None]] = {"compute": [], wait_name: [], "idle": []}
    # A saved report's columns may differ in length: draw what pairs up.
    for i, (end, step) in enumerate(zip(times, steps, strict=False)):
        if step is None or end is None:
            for values in out.values():
                values.append(None)
            continue
        wait = min(step, (waits[i] if i < len(waits) else None) or 0.0)
        before = times[i - 1] if i else None
        start = before if before is not None else end - step
        window = [
            u
            for t, u in zip(gpu_t, gpu_u, strict=False)
            if u is not None and t is not None and start <= t <= end
        ]
        busy = sum(window) / len(window) if window else r.gpu_utilization
        share = 1.0 if busy is None else max(0.0, min(1.0, busy / 100))
        out["compute"].append((step - wait) * share)
        out[wait_name].append(wait)
        out["idle"].append((step - wait) * (1 - share))
    return out


def _breakdown(r: RunReport) -> str:
    parts = breakdown(r)
    chart = None
    steps = [v for v in r.series.get("step_time_s", ()) if v is not None]
    # seconds where a step takes one or more (a CPU's), else milliseconds
    scale, unit = (1.0, "s") if max(steps, default=0.0) >= 1 else (1e3, "ms")
    if any(v is not None for v in parts["compute"]):
        chart = svg.stacked_bars(
            "chart-step-breakdown",
            f"step time: compute, {_label('input_wait_share')}, idle",
            r.series["time_s"],
            [
                (name, [None if v is None else v * scale for v in values])
                for name, values in parts.items()
            ],
            x_label="seconds since start",
            y_label=f"{unit} per step",
        )
    wait = (
        f" ({r.input_wait_share:.1%} of steady-state time)"
        if r.input_wait_share is not None
        else ""
    )
    busy = (
        "the GPU busy share of the rest, by NVML"
        if r.series.get("gpu_time_s") or r.gpu_utilization is not None
        else "all of the rest: no NVML samples tell busy from idle"
    )
    reduce = (
        f" This rank waited for the gradient all-reduce {r.communication_share:.1%} of each "
        "step, after its backward pass (every rank's: Figures, all-reduce wait)."
        if r.communication_share is not None
        else ""
    )
    return _figure(
        "chart-step-breakdown",
        chart,
        f"Time per step of each window ({unit}): compute ({busy}), "
        f"{_label('input_wait_share')}{wait} and idle.{reduce}",
        _why(r, "step_time_s", default="no steady-state window measured"),
    )


def _mfu(r: RunReport) -> str:
    if r.achieved_tflops is None:
        return _figure(
            "chart-mfu",
            None,
            "",
            _why(r, "achieved_tflops", "flops_per_step", default="no FLOPs counted"),
        )
    items = [("achieved", r.achieved_tflops)]
    if r.calibrated_tflops is not None:
        items.append(("measured peak", r.calibrated_tflops))
    if r.peak_tflops is not None:
        items.append(("datasheet peak", r.peak_tflops))
    if r.precision_mfu:  # the peak these FLOPs could reach, float8 ones at fp8's
        items.append((f"fp8/{r.matmul_dtype} peak", r.achieved_tflops / r.precision_mfu))
    # the unit the largest bar reads best in: GFLOP/s for a CPU's rates
    scale, unit = (1.0, "TFLOP/s") if max(v for _, v in items) >= 1 else (1e3, "GFLOP/s")
    chart = svg.bars(
        "chart-mfu",
        f"achieved {unit} against the peaks",
        [(name, value * scale) for name, value in items],
        unit=unit,
    )
    parts = [
        f"{mfu_label(r)} {r.mfu:.1%} of the datasheet peak ({r.peak_source})"
        if r.mfu is not None
        else f"no datasheet peak: {r.notes.get('mfu', r.peak_source or 'unknown')}"
    ]
    if r.float8_share is not None:
        parts.append(f"{r.float8_share:.1%} of the matmul FLOPs ran in float8")
    if (mixed := precision(r)) is not None:
        parts.append(" ".join(mixed))
    if r.mfu_calibrated is not None:
        parts.append(f"{r.mfu_calibrated:.1%} of the measured peak ({r.calibration_method})")
    if (hardware := recomputation(r)) is not None:
        parts.append(" ".join(hardware))
    return _figure("chart-mfu", chart, "; ".join(parts) + ".", "")


# (chart, the figure it draws, the unit on its axis, the axis' end where no value passes it)
_GPU = (
    ("chart-gpu-utilization", "gpu_utilization", "percent", 100.0),
    ("chart-gpu-power", "power_w", "W", None),
    ("chart-gpu-memory", "gpu_memory_used_bytes", "GB", None),
)


def _gpu(r: RunReport) -> list[str]:
    s = r.series
    if not s.get("gpu_time_s"):  # no samples: the reason once, the charts' ids kept
        why = html.escape(_why(r, "gpu_utilization", default="no NVML samples"))
        rest = "".join(f'<span id="{chart_id}"></span>' for chart_id, *_ in _GPU[1:])
        figure = (
            f'<figure id="chart-gpu-figure" class="empty"><p id="{_GPU[0][0]}" '
            f'class="chart empty">No GPU charts: {why}</p>{rest}</figure>'
        )
        return [figure]
    out = []
    for chart_id, key, unit, end in _GPU:
        values, title = s.get(key, []), _label(key)
        chart = None
        if any(v is not None for v in values):
            shown = [None if v is None else v / 1e9 for v in values] if unit == "GB" else values
            chart = svg.line_chart(
                chart_id,
                f"{title} over the run",
                s["gpu_time_s"],
                [(title, shown)],
                x_label="seconds since start",
                y_label=unit,
                y_max=end,
            )
        out.append(
            _figure(
                chart_id,
                chart,
                f"{title} over the run ({unit}), from NVML, sampled about ten times a second.",
                _why(r, key, "gpu_utilization", default="no NVML samples"),
            )
        )
    return out


def _plan(plan: Mapping[str, Any]) -> str:
    settings = plan.get("settings") or []
    if not settings:
        return "<p>No plan recorded.</p>"
    esc = html.escape
    rows = "".join(
        f"<tr><td>{esc(str(s.get('key')))}</td><td>{esc(str(s.get('value')))}</td>"
        f"<td>{esc(str(s.get('status', '')))}</td>"
        f"<td>{esc(str(s.get('reason', '')))}</td></tr>"
        for s in settings
    )
    return (
        f"<p>precision {esc(str(plan.get('precision')))}, distribution "
        f"{esc(str(plan.get('distribution')))}</p>"
        '<table id="plan"><tr><th>setting</th><th>value</th><th>status</th>'
        f"<th>reason</th></tr>{rows}</table>"
    )


def _advice(advice: Sequence[Mapping[str, Any]]) -> str:
    if not advice:
        return "<p>No advice: nothing measured calls for a change.</p>"
    esc = html.escape
    items = []
    for a in advice:
        evidence = evidence_line(a)
        items.append(
            f"<li><strong>[{esc(str(a.get('severity', 'info')))}] "
            f"{esc(str(a.get('title', '')))}</strong>"
            + (f"<br>evidence: {esc(evidence)}" if evidence else "")
            + (f"<pre>{esc(str(a['action']))}</pre>" if a.get("action") else "")
            + (f"gain: {esc(str(a['expected_gain']))}" if a.get("expected_gain") else "")
            + "</li>"
        )
    return f'<ol id="advice">{"".join(items)}</ol>'


def _loss(r: RunReport) -> str:
    """Each epoch's mean training loss, and each evaluation's, over the steps."""
    found = training.losses(r)
    chart = caption = None
    if found is not None:
        xs = sorted({x for x, _ in (*found.train, *found.evaluation)})
        lines = []
        for name, points in (("training loss", found.train), ("evaluation loss", found.evaluation)):
            if points:
                by_step = dict(points)
                lines.append((name, [by_step.get(x) for x in xs]))
        chart = svg.line_chart(
            "chart-loss",
            "loss over the steps",
            xs,
            lines,
            x_label="step",
            y_label="loss",
            dots=True,
        )
        caption = _loss_caption(r, found)
    return _figure(
        "chart-loss",
        chart,
        caption or "",
        _why(
            r,
            "losses",
            default="no loss recorded (a loop that does not hand accelkit its loss, or a "
            "report saved before accelkit kept the losses)",
        ),
    )


def _loss_caption(r: RunReport, found: training.Losses) -> str:
    epochs = len(found.train)
    parts = [
        f"Mean training loss of each of {epochs} epoch{'s' if epochs != 1 else ''}, at the "
        "step that ended it (epochs taken as equal in steps: the report keeps a mean per "
        "epoch, not a loss per step)"
        if found.train
        else "No training loss recorded"
    ]
    if found.evaluation:
        count = len(found.evaluation)
        where = (
            "after each epoch"
            if found.evaluations_per_epoch
            else "spread evenly over the run (the report keeps the losses, not the steps "
            "they followed)"
        )
        parts.append(f"mean loss of each of {count} evaluation{'s' if count != 1 else ''}, {where}")
    elif r.evaluation_seconds:
        parts.append("the run evaluated, but its evaluation losses were not recorded")
    else:
        parts.append("the run did not evaluate")
    return "; ".join(parts) + "."


def _spread(r: RunReport) -> str:
    """The windows' step times as a histogram with their p50, p95 and p99."""
    found = training.spread(r.series.get("step_time_s", ()))
    chart = caption = None
    if found is not None:
        scale, unit = (1.0, "s") if found.edges[-1] >= 1 else (1e3, "ms")
        marks = [(f"p{p} {units.duration(v)}", v * scale) for p, v in found.percentiles.items()]
        chart = svg.histogram(
            "chart-step-spread",
            "the windows' step times",
            [e * scale for e in found.edges],
            found.counts,
            x_label=f"{unit} per step (each window's mean)",
            y_label="windows",
            lines=marks,
        )
        mean = f"; {units.duration(r.step_time_s)} over the steady state" if r.step_time_s else ""
        caption = (
            f"Step time of the {found.windows} steady-state windows: "
            + ", ".join(name for name, _ in marks)
            + f"{mean}. The report keeps each window's mean step time, not each step's: "
            "these are percentiles of windows, and one slow step is averaged into its window."
        )
    return _figure(
        "chart-step-spread",
        chart,
        caption or "",
        _why(r, "step_time_s", default="no steady-state window measured"),
    )


def _mfu_time(r: RunReport) -> str:
    """MFU per window over the run; achieved FLOP/s where no peak is known."""
    found = training.window_mfu(r)
    chart = caption = None
    if found is not None and r.series.get("time_s"):
        name, values = found
        known = [v for v in values if v is not None]
        if name == "achieved_tflops":
            scale, y_label = (1.0, "TFLOP/s") if max(known, default=0) >= 1 else (1e3, "GFLOP/s")
            what = f"Achieved {y_label} of each window: no peak to take MFU against"
        else:
            scale, y_label = 100.0, "MFU (%)"
            peak = "the datasheet peak" if name == "mfu" else "the measured peak"
            what = f"{_label(name)} of each window, against {peak}"
        chart = svg.line_chart(
            "chart-mfu-time",
            f"{_label(name)} over the run",
            r.series["time_s"],
            [(_label(name), [None if v is None else v * scale for v in values])],
            x_label="seconds since start",
            y_label=y_label,
            **_pause_marks(r),
        )
        caption = f"{what} (FLOPs per step / the window's step time).{_pauses_caption(r)}"
    return _figure(
        "chart-mfu-time",
        chart,
        caption or "",
        _why(r, "flops_per_step", "achieved_tflops", default="no FLOPs counted or no window"),
    )


def _pause_marks(r: RunReport) -> dict[str, Any]:
    """The `line_chart` arguments that mark where training paused."""
    found = training.pauses(r.series)
    return {"marks": [t for t, _ in found], "marks_name": _pause_name(r)} if found else {}


def _pause_name(r: RunReport) -> str:
    evaluation, other = r.evaluation_seconds or 0.0, r.other_seconds or 0.0
    if evaluation and evaluation >= 0.9 * (evaluation + other):
        return "evaluation"
    return "evaluation or the rest" if evaluation else "paused"


def _pauses_caption(r: RunReport) -> str:
    found = training.pauses(r.series)
    evaluated = (
        f"the run evaluated for {r.evaluation_seconds:,.1f} s" if r.evaluation_seconds else ""
    )
    if not found:
        return f" No pause inside the windows' span ({evaluated})." if evaluated else ""
    stopped = sum(seconds for _, seconds in found)
    return (
        f" Dashed lines ({_pause_name(r)}): the {len(found)} window"
        f"{'s' if len(found) != 1 else ''} in which training stopped, {stopped:,.1f} s in "
        "all (wall time less training time)"
        + (f"; {evaluated}" if evaluated else "; the run did not evaluate")
        + "."
    )
