"""Plain-text tables for terminals: plans, runs, advice, projections. A leaf: nothing
in accelkit imports it at module level (`Plan.__str__` and `RunReport.__str__`
forward here on call).

Every renderer takes a `width`; left out, it is the terminal's (``COLUMNS`` first), or
100 where there is no terminal, so ``print(plan)`` fits the window it prints in and a
log file gets 100 columns. See `accelkit.report.text` for how lines are fitted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from accelkit.advisor.projection import (
    NotProjected,
    Projection,
    leaders,
    not_projected,
    projected,
    ranked,
)
from accelkit.profiling.metrics import label
from accelkit.profiling.tuning import Check
from accelkit.report.phases import describe, run_time
from accelkit.report.text import paragraph, printable, table, terminal_width
from accelkit.utils import units

if TYPE_CHECKING:
    from accelkit.hardware.info import HardwareInfo
    from accelkit.planning.types import MemoryEstimate, Plan
    from accelkit.profiling.run_report import RunReport


def describe_hardware(hardware: HardwareInfo) -> str:
    if not hardware.gpus:
        return "no NVIDIA GPU"
    names: dict[str, int] = {}
    for gpu in hardware.gpus:
        names[gpu.name] = names.get(gpu.name, 0) + 1
    parts = []
    for name, count in names.items():
        cc = next(g.compute_capability for g in hardware.gpus if g.name == name)
        cc_text = f", cc {cc[0]}.{cc[1]}" if cc else ""
        parts.append(f"{count} x {name}{cc_text}")
    return "; ".join(parts)


def _value(value: object) -> str:
    text = str(value)
    return text if len(text) <= 48 else text[:45] + "..."


def render_plan(plan: Plan, width: int | None = None, shown: Sequence[str] = ()) -> str:
    """The plan as a table: every setting with its value, status and reason, then notes.

    Args:
        plan: the plan to show.
        width: columns to fit (default: the terminal's, see the module docstring).
        shown: notes printed already above the table (`accelkit doctor` prints the
            hardware's), left out here so each is said once.
    """
    width = terminal_width(width)
    head = (
        f"accelkit plan: {plan.framework.value}, precision {plan.precision.value}, "
        f"distribution {plan.distribution.value} -- {describe_hardware(plan.hardware)} "
        f"({plan.hardware.source})"
    )
    rows = []
    for s in plan.settings:
        status = s.status.value
        reason = s.reason if not s.detail else f"{s.reason} [{s.detail}]"
        rows.append((s.key, _value(s.value), status, reason))
    body = table(("setting", "value", "status", "reason"), rows, width=width)
    notes = "".join("\n" + paragraph(f"note: {n}", width) for n in _unique(plan.notes, shown))
    memory = "" if plan.memory is None else "\n" + paragraph(_memory_line(plan.memory), width)
    return f"{paragraph(head, width)}{memory}\n{body}{notes}"


def _memory_line(memory: MemoryEstimate) -> str:
    """The plan's memory in one line; the settings below give the reasons."""
    usable = (
        f" of {units.gigabytes(memory.usable_bytes)} usable"
        if memory.usable_bytes is not None
        else " (device memory unknown)"
    )
    return (
        f"memory: {memory.choice}: {units.gigabytes(memory.per_gpu_bytes)} per GPU{usable}, "
        f"{units.gigabytes(memory.state_bytes)} of state in all ({memory.bytes_per_param:g} B "
        f"per trainable parameter, {memory.optimizer}), activations {memory.activations}"
    )


def _unique(notes: Sequence[str], shown: Sequence[str] = ()) -> list[str]:
    """`notes` without repeats and without those in `shown`, in their order."""
    hidden = set(shown)
    return [n for n in dict.fromkeys(notes) if n not in hidden]


def _num(value: float | None, fmt: str = "{:,.1f}", missing: str = "-") -> str:
    return missing if value is None else fmt.format(value)


Row = tuple[str, str]  # (figure, value)


def render_run(report: RunReport, width: int | None = None) -> str:
    """A compact table of what a run measured, then what it could not measure and why
    (each reason once), the notes on the figures shown, and the advice; fitted to
    `width` (default: the terminal's).

    Example:
        >>> print(render_run(report))  # doctest: +SKIP
        accelkit run: torch, GPT2LMHeadModel on cuda:0 NVIDIA H200, precision bf16 ...
        figure       value
        -----------  -----
        time         120.0 s = training 80.1 s (67%), evaluation 30.2 s (25%), other ...
    """
    r, width = report, terminal_width(width)
    body = table(("figure", "value"), run_rows(r), width=width)
    tuning = "\n" + render_tuning(r.tuning, width) if r.tuning else ""
    lists = "".join(
        f"\n{title}:"
        + "".join("\n" + paragraph(f"{k}: {v}", width, "  ", "    ") for k, v in items)
        for title, items in (("not measured", unmeasured(r)), ("notes", run_notes(r)))
        if items
    )
    advice = "\nadvice:\n" + render_advice(r.advice, width) if r.advice else ""
    # the strings come from a run or a file: escaped once, here, before any terminal
    return printable(f"{paragraph(_run_head(r), width)}\n{body}{tuning}{lists}{advice}")


def run_rows(r: RunReport) -> list[Row]:
    """The figures a run measured, each once, in the units people read (`units`); a
    figure that was not measured has no row (`unmeasured` says why)."""
    rows = [*_time_rows(r), *_training_rows(r), *_device_rows(r), *_world_rows(r)]
    rows += [
        (name, " -> ".join(f"{v:.4g}" for v in _ends(values)))
        for name, values in (("loss", r.losses), ("evaluation loss", r.eval_losses))
        if values
    ]
    return rows


def unmeasured(r: RunReport) -> list[Row]:
    """The figures a run could not measure, with the reason: one line per reason, naming
    every figure it holds for (two GPU figures without NVML samples share one)."""
    by_reason: dict[str, list[str]] = {}
    for field, reason in r.notes.items():
        if _is_unmeasured(r, field):
            by_reason.setdefault(reason, []).append(label(field))
    return [(", ".join(labels), reason) for reason, labels in by_reason.items()]


def run_notes(r: RunReport) -> list[Row]:
    """The notes that are not reasons for a missing figure: how a shown figure was
    obtained, what a run changed or skipped."""
    return [
        (label(field), note)
        for field, note in r.notes.items()
        if not _is_unmeasured(r, field) and not _says_nothing(r, field)
    ]


def _is_unmeasured(r: RunReport, field: str) -> bool:
    known = {f.name for f in dataclasses.fields(r)}
    return field in known and getattr(r, field) is None and not _says_nothing(r, field)


def _says_nothing(r: RunReport, field: str) -> bool:
    """A note with nothing to tell: a single device has no scaling to measure."""
    return field == "scaling_efficiency" and r.world_size <= 1


def _run_head(r: RunReport) -> str:
    return (
        f"accelkit run: {r.framework}, {r.model} on {r.device}, precision {r.precision} "
        f"(matmuls {r.matmul_dtype}), {r.steps} steps ({r.warmup_steps} warm-up"
        f"{f', {r.warmup_seconds:.2f} s' if r.warmup_seconds else ''})"
        f"{' -- INTERRUPTED' if r.interrupted is True else ''}"
    )


def _time_rows(r: RunReport) -> list[Row]:
    """The run's wall time by phase (`accelkit.report.phases`); none for a report saved
    before the phases were measured."""
    time = run_time(r)
    return [] if time is None else [("time", describe(time))]


def _training_rows(r: RunReport) -> list[Row]:
    """Throughput, step time, FLOPs and MFU: figures of the training steps alone."""
    rates = []
    if r.samples_per_second:
        rates.append(f"{units.per_second(r.samples_per_second)} {label('samples_per_second')}")
    if r.tokens_per_second:
        real = r.real_tokens_per_second
        rates.append(
            f"{r.tokens_per_second:,.0f} {label('tokens_per_second')}"
            + (f" ({real:,.0f} real, without padding)" if real is not None else "")
        )
    rows = [("throughput", ", ".join(rates))] if rates else []
    if r.step_time_s:
        rows.append(("step time", units.duration(r.step_time_s)))
    if r.flops_per_step:
        method = f" ({r.flops_method})" if r.flops_method else ""
        rows.append((label("flops_per_step"), units.flops(r.flops_per_step) + method))
    if r.achieved_tflops is not None:
        rows.append(("achieved", units.flop_rate(r.achieved_tflops)))
    return rows + _utilisation_rows(r)


def _utilisation_rows(r: RunReport) -> list[Row]:
    """MFU against the datasheet peak, then what sits beside it: the float8 share and
    the utilisation against the peaks those FLOPs could reach, HFU, the measured peak's."""
    rows = []
    if r.mfu is not None and r.peak_tflops:
        # the datasheet row's source names the peak with its figure: said once
        peak = units.flop_rate(r.peak_tflops)
        of = (
            f"the datasheet peak: {r.peak_source}"
            if r.peak_source
            else f"{peak}, the datasheet peak"
        )
        rows.append((mfu_label(r), f"{r.mfu:.1%} of {of}"))
    if r.float8_share is not None:
        rows.append((label("float8_share"), f"{r.float8_share:.1%} of the counted matmul FLOPs"))
    if (mixed := precision(r)) is not None:
        rows.append(mixed)
    if (hardware := recomputation(r)) is not None:
        rows.append(hardware)
    if r.mfu_calibrated is not None and r.calibrated_tflops:
        how = f" ({r.calibration_method})" if r.calibration_method else ""
        rate = units.flop_rate(r.calibrated_tflops)
        rows.append((label("mfu_calibrated"), f"{r.mfu_calibrated:.1%} of {rate} measured{how}"))
    return rows


def mfu_label(r: RunReport) -> str:
    """MFU's name: "MFU", and where part of the step ran in float8, the peak it is
    counted against, "MFU (vs bf16 dense peak)" (`precision` gives the other).

    Example:
        >>> from accelkit.profiling.run_report import RunReport
        >>> mfu_label(RunReport("torch", "m", "cuda:0", "bf16", "bf16", float8_share=0.6))
        'MFU (vs bf16 dense peak)'
    """
    if r.float8_share is None:
        return label("mfu")
    return f"{label('mfu')} (vs {r.matmul_dtype} dense peak)"


def precision(r: RunReport) -> Row | None:
    """``precision_mfu`` beside MFU where part of the step ran in float8: the share of
    the peak those FLOPs could reach (achieved / precision_mfu: the float8 ones at the fp8
    dense peak, the rest at MFU's), as (label, "x% of ..."); None without it.

    Example:
        >>> from accelkit.profiling.run_report import RunReport
        >>> r = RunReport("torch", "m", "cuda:0", "bf16", "bf16", achieved_tflops=300.0,
        ...               mfu=0.3, float8_share=0.75, precision_mfu=0.1875)
        >>> print(precision(r)[1])  # doctest: +ELLIPSIS
        18.8% of 1,600 TFLOP/s, the peak these FLOPs could reach (float8 ones at fp8, ...)
    """
    if r.precision_mfu is None:
        return None
    reach = f"(float8 ones at fp8, the rest at {r.matmul_dtype})"
    if r.achieved_tflops and r.precision_mfu > 0:
        peak = units.flop_rate(r.achieved_tflops / r.precision_mfu)
        text = f"{r.precision_mfu:.1%} of {peak}, the peak these FLOPs could reach {reach}"
    else:
        text = f"{r.precision_mfu:.1%} of the peak these FLOPs could reach {reach}"
    return label("precision_mfu"), text


def recomputation(r: RunReport) -> Row | None:
    """HFU beside MFU where they differ (PaLM appendix B): what the forward that activation
    checkpointing recomputed costs, as ("HFU", "x% (...)"), or the hardware FLOPs per
    step where no peak gives an HFU. None when nothing was recomputed or it is not known.

    Example:
        >>> from accelkit.profiling.run_report import RunReport
        >>> r = RunReport("torch", "m", "cuda:0", "bf16", "bf16", flops_per_step=6e12,
        ...               hardware_flops_per_step=8e12, mfu=0.3, hfu=0.4)
        >>> recomputation(r)
        ('HFU', '40.0% (8.00 TFLOP/step, the recomputed forward counted)')
    """
    hardware = r.hardware_flops_per_step
    if hardware is None or not r.flops_per_step or hardware <= r.flops_per_step:
        return None
    per_step = f"{units.flops(hardware)}/step"
    if r.hfu is not None:
        return label("hfu"), f"{r.hfu:.1%} ({per_step}, the recomputed forward counted)"
    return label("hardware_flops_per_step"), f"{per_step} (the recomputed forward counted)"


def _device_rows(r: RunReport) -> list[Row]:
    """Input wait, the NVML figures that were sampled and the framework's peak memory."""
    rows = []
    if r.input_wait_share is not None:
        rows.append((label("input_wait_share"), f"{r.input_wait_share:.1%} of step time"))
    gpu = [
        text
        for value, text in (
            (r.gpu_utilization, f"busy {_num(r.gpu_utilization, '{:.0f}')}%"),
            (
                r.gpu_memory_used_bytes,
                f"memory used {units.gigabytes(r.gpu_memory_used_bytes or 0)}",
            ),
            (r.power_w, f"power {_num(r.power_w, '{:,.0f}')} W"),
            (r.sm_clock_mhz, f"SM clock {_num(r.sm_clock_mhz, '{:,.0f}')} MHz"),
        )
        if value is not None
    ]
    if gpu:
        rows.append(("GPU", ", ".join(gpu)))
    if r.peak_memory_bytes is not None:
        rows.append(
            (
                label("peak_memory_bytes"),
                f"{units.gigabytes(r.peak_memory_bytes)} allocated by the framework",
            )
        )
    return rows


def _world_rows(r: RunReport) -> list[Row]:
    """A data-parallel run's figures across its processes; none for one process."""
    if r.world_size <= 1:
        return []
    efficiency = _num(r.scaling_efficiency and r.scaling_efficiency * 100)
    return [
        (
            "all ranks",
            (
                f"{r.world_size} processes, {_num(r.global_samples_per_second)} "
                f"{label('samples_per_second')}, scaling efficiency {efficiency}%"
            ),
        ),
        ("all-reduce wait", _all_reduce_wait(r)),
    ]


def _all_reduce_wait(r: RunReport) -> str:
    """Each rank's wait for the gradient all-reduce (share of its step), or why unknown."""
    shares = [
        f"rank {k['rank']} {k['communication_share']:.1%}"
        for k in r.ranks
        if k.get("communication_share") is not None
    ]
    if not shares:
        return f"- ({r.notes.get('communication_share', 'not measured')})"
    return "of each step, after the backward pass: " + ", ".join(shares)


def render_tuning(tuning: Mapping[str, Any], width: int | None = None) -> str:
    """What `tune` measured: one row per candidate, the kept one marked; a checked
    candidate's loss and gradient differences from the eager step against their limits.

    Example:
        >>> print(render_tuning(report.tuning))  # doctest: +SKIP
        tuning: kept compile+fused, 2.31x eager; trials 30 steps, 48.2 s
    """
    width = terminal_width(width)
    if tuning.get("decision") != "tuned":
        return paragraph(f"tuning: {tuning.get('decision')}", width)
    speedup = tuning.get("speedup")
    head = (
        f"tuning: kept {tuning.get('chosen')}"
        + (f", {speedup:.2f}x {tuning.get('baseline')}" if speedup else "")
        + f"; trials {tuning.get('steps')} steps, {_num(tuning.get('seconds'))} s"
    )
    rows = []
    for c in tuning.get("candidates") or ():
        step = c.get("step_seconds")
        spread: Sequence[float] = c.get("spread") or ()
        timing = (
            "-"
            if step is None
            else (
                f"{step * 1e3:.2f}"
                + (f" ({spread[0] * 1e3:.2f}-{spread[1] * 1e3:.2f})" if len(spread) == 2 else "")
            )
        )
        check = Check.from_dict(c.get("check"))
        rows.append(
            (
                c.get("name", "?"),
                c.get("status", "?"),
                timing,
                _num(c.get("compile_seconds")) + (" (cached)" if c.get("compile_cached") else ""),
                check.describe() if check else "-",
                c.get("why") or "",
            )
        )
    headers = ("candidate", "status", "step ms (min-max)", "compile s", "check vs eager", "why")
    return paragraph(head, width) + "\n" + table(headers, rows, width=width)


def render_advice(advice: Sequence[Mapping[str, Any]], width: int | None = None) -> str:
    """Numbered verdicts, each with its evidence, action and expected gain, wrapped at
    `width` (default: the terminal's)."""
    width = terminal_width(width)
    lines: list[str] = []
    for i, a in enumerate(advice, 1):
        lead = f"  {i}. "
        pad = " " * len(lead)
        lines.append(
            paragraph(f"[{a.get('severity', 'info')}] {a.get('title', '')}", width, lead, pad)
        )
        evidence = evidence_line(a)
        for name, text in (
            ("evidence", evidence),
            ("do", a.get("action")),
            ("gain", a.get("expected_gain")),
        ):
            for n, part in enumerate(str(text or "").splitlines()):
                first = pad + (f"{name}: " if n == 0 else "  ")
                lines.append(paragraph(part, width, first, pad + "  "))
    return "\n".join(line for line in lines if line)


def evidence_line(advice: Mapping[str, Any]) -> str:
    """An advice item's evidence as ``name=value`` pairs, for the text and the page."""
    return ", ".join(f"{k}={evidence_text(v)}" for k, v in (advice.get("evidence") or {}).items())


def evidence_text(value: Any) -> str:
    """An evidence value as the advice shows it: floats to four significant digits."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return "[" + "; ".join(evidence_text(v) for v in value) + "]"
    return str(value)


def _ends(values: list[float]) -> list[float]:
    return values if len(values) <= 4 else [values[0], values[1], values[-2], values[-1]]


def render_projections(
    projections: Sequence[Projection | NotProjected], width: int | None = None
) -> str:
    """A table of the projections with a figure, ranked by epoch time, with the rank by
    cost, fitted to `width` (default: the terminal's); then each one without a figure,
    with the reason."""
    width = terminal_width(width)
    rows = []
    for p, by_time, by_cost in ranked(projections):
        rows.append(
            (
                p.gpu,
                str(p.count),
                p.dtype,
                f"{p.peak_tflops * p.count:,.0f}",
                f"{p.mfu:.0%}",
                units.duration(p.step_time_s),
                f"{p.input_wait_s / p.step_time_s:.0%}",
                f"{p.host_s / p.step_time_s:.0%}",
                f"{p.exposed_allreduce_s / p.step_time_s:.0%}" if p.count > 1 else "-",
                units.duration(p.epoch_time_s),
                "-" if p.cost_per_epoch is None else units.money(p.cost_per_epoch),
                str(by_time),
                "-" if by_cost is None else str(by_cost),
            )
        )
    headers = (
        "gpu",
        "n",
        "dtype",
        "peak TFLOP/s",
        "MFU",
        "step",
        "input",
        "host",
        "all-reduce",
        "epoch",
        "cost/epoch",
        "by time",
        "by cost",
    )
    body = table(headers, rows, width=width) if rows else ""
    lines = ["what-if projection: the same run on other GPUs", body, *leaders(projections)]
    lines += [f"not projected: {p.count} x {p.gpu}: {p.reason}" for p in not_projected(projections)]
    lines += [
        f"assumes{f' for {who}' if who else ''}: {text}"
        for text, who in _assumptions(projected(projections))
    ]
    return "\n".join(line if line is body else paragraph(line, width) for line in lines if line)


def _assumptions(projections: Sequence[Projection]) -> list[tuple[str, str]]:
    """Each distinct assumption once, with the GPUs it is for ('' when for all)."""
    holders: dict[str, list[str]] = {}
    for p in projections:
        for text in p.assumptions:
            holders.setdefault(text, []).append(f"{p.count} x {p.gpu}")
    return [
        (text, "" if len(who) == len(projections) else ", ".join(who))
        for text, who in holders.items()
    ]
