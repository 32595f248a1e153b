"""Turns what the meters measured into a `RunReport`'s figures; the same for every
framework. The advice is added one stage later, by `accelkit.report.assemble`."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from accelkit.hardware import capabilities
from accelkit.hardware.info import HardwareInfo
from accelkit.planning.types import Plan, Precision
from accelkit.profiling import metrics, mfu, world
from accelkit.profiling.clock import EVALUATION, OTHER, ClockSummary
from accelkit.profiling.flop_count import FlopCount, StepFlops
from accelkit.profiling.run_report import RunReport
from accelkit.profiling.sampler import SamplerSummary
from accelkit.utils.versions import versions


@dataclasses.dataclass
class Measurements:
    """Everything a meter collected during one run."""

    framework: str
    model: str
    device: str
    plan: Plan
    hardware: HardwareInfo
    clock: ClockSummary
    tf32_enabled: bool = False
    # The precision the model really computed in, when the meter could read it (Keras:
    # its layers' compute dtype); None: the plan's.
    precision: Precision | None = None
    devices: int = 1  # devices this process drives (MirroredStrategy replicas)
    gpu: int = 0  # index into hardware.gpus of the first device used
    flops: FlopCount | None = None
    flops_per_step: float | None = None  # the user's figure, overriding the count
    # The FLOPs of one step that ran in float8 (Recorder.set_float8_flops); None: none did.
    float8_flops_per_step: float | None = None
    sampler: SamplerSummary | None = None
    peak_memory_bytes: int | None = None
    calibration: Any = None  # accelkit.profiling.calibrate.Calibration
    epochs: int | None = None
    losses: Sequence[float] = ()
    eval_losses: Sequence[float] = ()
    interrupted: bool = False
    notes: dict[str, str] = dataclasses.field(default_factory=dict)
    # What the advisor reads besides the figures (accelkit.advisor.context lists them).
    facts: dict[str, Any] = dataclasses.field(default_factory=dict)
    single_device_samples_per_second: float | None = None
    tuning: dict[str, Any] | None = None  # accelkit.torch.tuning.trials.TuneResult.to_dict()
    # The steady-state gradient all-reduces of a data-parallel run, added up
    # (accelkit.torch.distributed.communication.GradientTimer.totals): exposed_s, in_flight_s,
    # reductions, buckets, gradient_bytes, sent_bytes, host_s, method.
    communication: dict[str, Any] | None = None


def _plain(data: dict[str, Any]) -> dict[str, Any]:
    """As JSON gives it back (lists, not tuples), so a saved report loads equal."""
    return json.loads(json.dumps(data, default=str))


def report_from(m: Measurements) -> RunReport:
    """The run's figures (throughput, FLOPs, MFU, device figures, ranks); no advice yet."""
    clock = m.clock
    precision = m.precision or m.plan.precision
    # MFU's peak: under fp8 the bf16 one, so that runs compare across precisions; the
    # float8 matmuls are weighed beside it (`_float8`).
    dtype = capabilities.matmul_dtype(precision.without_float8, m.tf32_enabled)
    report = RunReport(
        framework=m.framework,
        model=m.model,
        device=m.device,
        precision=precision.value,
        matmul_dtype=dtype,
        epochs=m.epochs,
        steps=clock.steps,
        warmup_steps=clock.warmup_steps,
        warmup_seconds=clock.warmup_s,
        steady_steps=clock.steady_steps,
        steady_seconds=clock.steady_s,
        step_time_s=clock.step_s,
        losses=[float(v) for v in m.losses],
        eval_losses=[float(v) for v in m.eval_losses],
        interrupted=m.interrupted,
        peak_memory_bytes=m.peak_memory_bytes,
        hardware=_plain(m.hardware.to_dict()),
        plan=_plain(m.plan.to_dict()),
        versions=versions(m.framework),
        notes=dict(m.notes),
        facts=_plain({**m.facts, "run_seconds": clock.total_s}),
        tuning=_plain(m.tuning) if m.tuning is not None else None,
    )
    if precision is not m.plan.precision:
        report.note(
            "precision",
            f"the plan chose {m.plan.precision.value}; the model's layers "
            f"computed in {precision.value}",
        )
    _throughput(report, clock)
    _phases(report, clock)
    _flops(report, m)
    _float8(report, m)
    _sampler(report, m.sampler)
    _communication(report, m.communication, clock)
    report.series = _series(clock, m.sampler)
    # One process's figures; a data-parallel meter replaces them with every rank's.
    world.aggregate(
        report,
        [world.rank_figures(report, 0, clock.steady_samples, m.devices)],
        m.single_device_samples_per_second,
    )
    return report


def _throughput(report: RunReport, clock: ClockSummary) -> None:
    if not clock.steady_s or not clock.steady_steps:
        why = (
            f"only {clock.steps} step(s), all warm-up ({clock.warmup_steps}): "
            "run more steps for steady-state figures"
        )
        for field in ("samples_per_second", "step_time_s", "input_wait_share"):
            report.note(field, why)
        return
    if clock.steady_samples:
        report.batch_size = clock.steady_samples / clock.steady_steps
        report.samples_per_second = clock.steady_samples / clock.steady_s
    else:  # steps without a batch to count (meter.step() alone): unknown, not zero
        report.note(
            "samples_per_second",
            "no batch sizes seen: give meter.step(batch) or meter.step(samples=N)",
        )
    if clock.steady_tokens:
        report.tokens_per_second = clock.steady_tokens / clock.steady_s
        if clock.steady_real_tokens is not None:
            report.real_tokens_per_second = clock.steady_real_tokens / clock.steady_s
        else:
            report.note(
                "real_tokens_per_second",
                "no attention_mask with the token ids (in "
                "every batch): padding is not told from real "
                "tokens; tokens_per_second counts every position",
            )
    else:
        report.note("tokens_per_second", "no sequence dimension found and no tokens_per_sample")
    report.input_wait_share = clock.input_wait_share


def _phases(report: RunReport, clock: ClockSummary) -> None:
    """The run's wall time: training, evaluation and the rest (`StepClock.pause`)."""
    if not clock.total_s:
        return
    report.run_seconds = clock.total_s
    report.training_seconds = clock.training_s
    report.evaluation_seconds = clock.phase_s.get(EVALUATION, 0.0)
    report.other_seconds = clock.phase_s.get(OTHER, 0.0)
    report.evaluation_share = report.evaluation_seconds / clock.total_s


def _flops_per_step(report: RunReport, m: Measurements) -> None:
    """Model FLOPs per step (the user's figure, else the count) and hardware FLOPs (the
    count's, with the forward activation checkpointing recomputed; PaLM appendix B)."""
    if m.flops_per_step is not None:
        report.flops_per_step, report.flops_method = float(m.flops_per_step), "given by the user"
        report.note(
            "hardware_flops_per_step",
            "not known when flops_per_step is given (recomputed activations or not)",
        )
    elif m.flops is not None and m.flops.total is not None:
        report.flops_per_step, report.flops_method = float(m.flops.total), m.flops.method
        if m.flops.notes:
            report.note("flops_per_step", "; ".join(m.flops.notes))
        hardware = m.flops.hardware
        report.hardware_flops_per_step = float(hardware) if hardware is not None else None
        if (own := _steps_own(m)) is not None:  # each step's batch counted: their mean
            report.flops_per_step, report.hardware_flops_per_step = own.model, own.hardware
    else:
        why = "; ".join(m.flops.notes) if m.flops is not None else "not counted"
        report.note("flops_per_step", why + " (pass flops_per_step= to give it)")


def _steps_own(m: Measurements) -> StepFlops | None:
    """The mean of the steady steps' own FLOPs, where the door gave each step its own
    (its batch's shape: `accelkit.profiling.flops_shapes`; the door's note says how)."""
    steps = m.clock.steady_steps
    if m.clock.steady_flops is None or not steps:
        return None
    flops = m.clock.steady_flops
    hardware = flops.hardware / steps if flops.hardware is not None else None
    return StepFlops(flops.model / steps, hardware, flops.float8 / steps)


def _flops(report: RunReport, m: Measurements) -> None:
    _flops_per_step(report, m)
    if report.flops_per_step is None or not report.steady_seconds:
        report.note("achieved_tflops", "needs flops_per_step and steady-state time")
        return
    steps, seconds = report.steady_steps, report.steady_seconds
    report.achieved_tflops = report.flops_per_step * steps / seconds / 1e12
    if report.hardware_flops_per_step is not None:
        report.hardware_tflops = report.hardware_flops_per_step * steps / seconds / 1e12
    found = mfu.peak(m.hardware, report.matmul_dtype, devices=m.devices, gpu=m.gpu)
    report.peak_source = found.source
    if found.tflops is not None:
        report.peak_tflops = found.tflops
        report.mfu = report.achieved_tflops / found.tflops
        if report.hardware_tflops is not None:
            report.hfu = report.hardware_tflops / found.tflops
    calibration = m.calibration
    if found.tflops is None:  # the remedy only where the run did not measure a rate
        remedy = f" ({found.remedy})" if found.remedy and calibration is None else ""
        report.note("mfu", found.source + remedy)
    if calibration is not None:
        report.calibrated_tflops = calibration.tflops * m.devices
        report.calibration_method = calibration.method
        report.mfu_calibrated = report.achieved_tflops / report.calibrated_tflops


def _float8(report: RunReport, m: Measurements) -> None:
    """The float8 share and the utilisation against the peaks its FLOPs could reach
    (`metrics.float8_figures`, the windows' formula); nothing, not even a note, where no
    matmul ran in float8."""
    own = _steps_own(m) if m.flops_per_step is None else None
    float8 = own.float8 if own is not None else m.float8_flops_per_step
    if not float8:
        return
    fp8 = mfu.peak(m.hardware, mfu.FLOAT8, devices=m.devices, gpu=m.gpu)
    figures = metrics.float8_figures(
        report.mfu,
        flops_per_step=report.flops_per_step,
        float8_flops_per_step=float8,
        peak_tflops=report.peak_tflops,
        float8_peak_tflops=fp8.tflops,
    )
    report.float8_share, report.precision_mfu = figures["float8_share"], figures["precision_mfu"]
    flops = report.flops_per_step
    if flops is None:  # one reason for both, said once
        why = f"{float8:.4g} FLOPs a step ran in float8, of a total not known"
        report.note("float8_share", why)
        report.note("precision_mfu", why)
        return
    if float8 > flops:
        report.note(
            "float8_share",
            f"the float8 FLOPs a step ({float8:.4g}) exceed flops_per_step ({flops:.4g}): "
            "counted as all of them",
        )
    if report.precision_mfu is not None:
        report.note("precision_mfu", f"float8 FLOPs at {fp8.source}; the rest at MFU's peak")
    elif report.mfu is None:  # MFU's own reason, so that one line names both
        report.note("precision_mfu", report.notes.get("mfu", "MFU is not known"))
    else:
        report.note("precision_mfu", fp8.source)


def _communication(report: RunReport, totals: dict[str, Any] | None, clock: ClockSummary) -> None:
    """Per steady-state step: the exposed all-reduce time and its share of the step.

    The timer times a sample of the backward passes (`accelkit.torch.distributed.communication`):
    the figures are means over the timed ones, one all-reduce of the gradients a step.
    """
    if totals is None or not clock.steady_s or not clock.steady_steps or not totals["reductions"]:
        return
    steps, timed = clock.steady_steps, totals["reductions"]
    report.communication_s = totals["exposed_s"] / timed
    report.communication_share = min(1.0, report.communication_s * steps / clock.steady_s)
    report.facts["communication"] = {
        "in_flight_s": totals["in_flight_s"] / timed,
        "all_reduces": totals["reductions"],
        "buckets": totals["buckets"],
        "gradient_bytes": totals["gradient_bytes"],
        "sent_bytes": totals["sent_bytes"],
        "hook_host_us": totals["host_s"] / steps * 1e6,
        "method": totals["method"],
    }


def _sampler(report: RunReport, summary: SamplerSummary | None) -> None:
    if summary is None or not summary.samples:
        for field in ("gpu_utilization", "power_w"):
            report.note(field, "no NVML samples (no NVIDIA GPU, or the run was too short)")
        return
    report.gpu_utilization = summary.gpu_utilization
    report.gpu_memory_used_bytes = summary.memory_used_bytes
    report.power_w = summary.power_w
    report.sm_clock_mhz = summary.sm_clock_mhz


def _series(clock: ClockSummary, sampler: SamplerSummary | None) -> dict[str, list[float | None]]:
    """The clock's window series and the sampler's, on seconds since the run started."""
    series = {name: list(values) for name, values in clock.series.items()}
    gpu = dict(sampler.series) if sampler is not None else {}
    times = gpu.pop("time", None)
    if times:
        zero = clock.started if clock.started is not None else times[0]
        series["gpu_time_s"] = [None if t is None or zero is None else t - zero for t in times]
        series.update((name, list(values)) for name, values in gpu.items())
    return series
