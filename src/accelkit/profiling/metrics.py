"""The figures accelkit hands to loggers, named once, and the one function that
computes a window's figures for every door.

A figure's name is the `RunReport` field it estimates over a stretch of the run (a
logging window, an epoch); each ecosystem spells it its own way (`spell`):

==================================  ===============================  ================
`RunReport` field                   Keras ``logs`` (History, CSV)    Lightning, HF
==================================  ===============================  ================
``samples_per_second``              ``accelkit_samples_per_second``  ``accelkit/...``
==================================  ===============================  ================

and so on for every `METRICS` entry: Keras keys take ``_`` only (a CSV column, a
pandas attribute and a TensorBoard tag take them as they are); the Lightning and
Hugging Face loggers group ``accelkit/`` keys in one TensorBoard or W&B section.
A figure that is not known over a window (MFU without a datasheet peak, the float8
share where no matmul ran in float8, GPU figures without NVML, input wait where it is
not timed) is left out of that window's row, never logged as 0.

Those series hold windows only, to the end of the run. The whole run's figures
(`RUN_FIGURES`: the run's step time, MFU, FLOPs per step, how many advice items...) are
another kind of number, a figure of every steady step at once: a logger gets them once,
when the run ends, under names of their own (``spell(name, ecosystem, run=True)``:
``accelkit/run/mfu``, ``accelkit_run_mfu``), never as the last point of a window series.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any, Literal

from accelkit.profiling.clock import WindowSums

if TYPE_CHECKING:
    from accelkit.profiling.run_report import RunReport

Ecosystem = Literal["keras", "lightning", "hf", "report"]


@dataclasses.dataclass(frozen=True)
class Metric:
    name: str  # the RunReport field
    label: str  # for people: the text table and the HTML page
    meaning: str


METRICS = (
    Metric("step_time_s", "step time (s)", "seconds per training step, device-synchronised"),
    Metric("samples_per_second", "samples/s", "training samples per second"),
    Metric("tokens_per_second", "tokens/s", "token positions per second (padding included)"),
    Metric("achieved_tflops", "TFLOP/s", "model FLOPs per step over the step time"),
    Metric("mfu", "MFU", "achieved FLOP/s over the datasheet's dense peak for the matmul dtype"),
    Metric(
        "hfu",
        "HFU",
        "hardware FLOP/s (the forward activation checkpointing recomputes included) over "
        "the same peak",
    ),
    Metric(
        "float8_share",
        "float8 share",
        "share of the step's counted matmul FLOPs that ran in float8 (torchao Float8Linear)",
    ),
    Metric(
        "precision_mfu",
        "MFU (vs fp8/bf16 peaks)",
        "the seconds the step's FLOPs take at peak (the float8 ones at the fp8 dense peak, the "
        "rest at MFU's) over the step time",
    ),
    Metric("input_wait_share", "input wait", "share of training time spent waiting for batches"),
    Metric("gpu_utilization", "GPU busy (%)", "NVML utilisation, mean over training"),
    Metric("gpu_memory_used_bytes", "GPU memory", "NVML memory used, the largest"),
    Metric("power_w", "power (W)", "NVML power draw, mean over training"),
    Metric("evaluation_share", "evaluation", "share of the run's wall time spent evaluating"),
)
BY_NAME = {metric.name: metric for metric in METRICS}
# The names people read for the other report fields a table or a note names.
LABELS = {
    "real_tokens_per_second": "real tokens/s",
    "flops_per_step": "FLOPs/step",
    "hardware_flops_per_step": "hardware FLOPs/step",
    "hardware_tflops": "hardware TFLOP/s",
    "peak_memory_bytes": "peak memory",
    "sm_clock_mhz": "SM clock (MHz)",
    "global_samples_per_second": "samples/s of all ranks",
    "scaling_efficiency": "scaling efficiency",
    "communication_share": "all-reduce wait",
    "mfu_calibrated": "MFU (measured peak)",
    "calibrated_tflops": "measured peak",
    "peak_tflops": "datasheet peak",
    "advice_count": "advice items",
}
# The whole run's figures a logger gets once, at the run's end (`run_figures`): every
# window figure over the whole steady run, and those only the run has.
RUN_FIGURES = (
    *(metric.name for metric in METRICS),
    "real_tokens_per_second",
    "flops_per_step",
    "peak_memory_bytes",
    "global_samples_per_second",  # of all ranks, where there are several
    "scaling_efficiency",
    "advice_count",  # len(report.advice)
)
_ALL_RANKS = ("global_samples_per_second", "scaling_efficiency")


def label(name: str) -> str:
    """The name people read for the report field `name`: its `METRICS` label, else its
    `LABELS` entry, else the field's name in words.

    Example:
        >>> label("samples_per_second"), label("peak_memory_bytes"), label("epochs")
        ('samples/s', 'peak memory', 'epochs')
    """
    if name in BY_NAME:
        return BY_NAME[name].label
    return LABELS.get(name, name.replace("_", " "))


_PREFIX = {"keras": "accelkit_", "lightning": "accelkit/", "hf": "accelkit/", "report": ""}
_RUN_PREFIX = {"keras": "run_", "lightning": "run/", "hf": "run/", "report": ""}


def spell(name: str, ecosystem: Ecosystem, *, run: bool = False) -> str:
    """`name` (a `METRICS` entry or another `RunReport` field) as `ecosystem` logs it;
    with `run`, the whole run's figure of that name (`RUN_FIGURES`), whose name is its
    own, apart from the windows' series.

    Example:
        >>> spell("mfu", "keras"), spell("mfu", "hf"), spell("mfu", "lightning", run=True)
        ('accelkit_mfu', 'accelkit/mfu', 'accelkit/run/mfu')
    """
    return _PREFIX[ecosystem] + (_RUN_PREFIX[ecosystem] if run else "") + name


def spelled(
    figures: Mapping[str, float], ecosystem: Ecosystem, *, run: bool = False
) -> dict[str, float]:
    """`figures` keyed as `ecosystem` logs them (`spell`)."""
    return {spell(name, ecosystem, run=run): value for name, value in figures.items()}


def run_figures(report: RunReport) -> dict[str, float]:
    """The whole run's figures (`RUN_FIGURES`) of `report` that are numbers: what a door
    logs once, at the run's end, spelled with ``run=True``. A figure not measured (None)
    is left out, as from a window's row, and so are the figures of all ranks in a run of
    one (its own figures).

    Example:
        >>> from accelkit.profiling.run_report import RunReport
        >>> report = RunReport(framework="torch", model="m", device="cpu",
        ...                    precision="fp32", matmul_dtype="fp32", step_time_s=0.5)
        >>> run_figures(report)
        {'step_time_s': 0.5, 'advice_count': 0.0}
    """
    several = report.world_size > 1
    figures = {
        name: getattr(report, name, None)
        for name in RUN_FIGURES
        if several or name not in _ALL_RANKS
    }
    figures["advice_count"] = len(report.advice)
    return {
        name: float(value)
        for name, value in figures.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool)
    }


def window_figures(
    sums: WindowSums,
    *,
    flops_per_step: float | None,
    peak_tflops: float | None,
    hardware_flops_per_step: float | None = None,
    float8_flops_per_step: float | None = None,
    float8_peak_tflops: float | None = None,
    gpu: Any = None,
    unmeasured: Collection[str] = (),
) -> dict[str, float]:
    """The figures of some steady windows of training (`StepClock.take`), by `METRICS`
    name; empty when they hold no time. The same arithmetic as the run's report
    (`accelkit.profiling.assemble`): MFU is model FLOPs per step x steps / seconds /
    peak, HFU the same with hardware FLOPs (PaLM, appendix B).

    Args:
        sums: the windows' steps, samples, tokens, input wait and training seconds, and
            the steps' own FLOPs where the door counted each batch's (`sums.flops`: they
            then stand for the three per-step FLOP figures below).
        flops_per_step: model FLOPs of one step, or None when not known.
        peak_tflops: the dense peak of the devices used, or None when not known.
        hardware_flops_per_step: FLOPs of one step with the forward activation
            checkpointing recomputes, or None when not known (no ``hfu``).
        float8_flops_per_step: the FLOPs of one step that ran in float8, or None when
            none did (no ``float8_share``, no ``precision_mfu``: `float8_figures`).
        float8_peak_tflops: the fp8 dense peak of the same devices, or None.
        gpu: a `SamplerSummary` over the same stretch, or None.
        unmeasured: figures the run cannot measure (its notes' fields): left out.

    Example:
        >>> sums = WindowSums(steps=10, samples=320, tokens=0, input_wait_s=0.5, seconds=5.0)
        >>> window_figures(sums, flops_per_step=2e12, peak_tflops=100.0,
        ...                hardware_flops_per_step=2.5e12)
        ... # doctest: +NORMALIZE_WHITESPACE
        {'step_time_s': 0.5, 'samples_per_second': 64.0, 'achieved_tflops': 4.0,
         'mfu': 0.04, 'hfu': 0.05, 'input_wait_share': 0.1}
    """
    if sums.seconds <= 0 or not sums.steps:
        return {}
    if sums.flops is not None:  # the steps' own, in the place of the run's one count
        per_step = sums.flops.times(1.0 / sums.steps)
        flops_per_step, hardware_flops_per_step = per_step.model, per_step.hardware
        float8_flops_per_step = per_step.float8 or None
    achieved, hardware = (
        flops * sums.steps / sums.seconds / 1e12 if flops else None
        for flops in (flops_per_step, hardware_flops_per_step)
    )
    figures: dict[str, Any] = {
        "step_time_s": sums.seconds / sums.steps,
        "samples_per_second": sums.samples / sums.seconds if sums.samples else None,
        "tokens_per_second": sums.tokens / sums.seconds if sums.tokens else None,
        "achieved_tflops": achieved,
        "mfu": achieved / peak_tflops if achieved and peak_tflops else None,
        "hfu": hardware / peak_tflops if hardware and peak_tflops else None,
        "input_wait_share": min(1.0, sums.input_wait_s / sums.seconds),
    }
    figures.update(
        float8_figures(
            figures["mfu"],
            flops_per_step=flops_per_step,
            float8_flops_per_step=float8_flops_per_step,
            peak_tflops=peak_tflops,
            float8_peak_tflops=float8_peak_tflops,
        )
    )
    if gpu is not None:
        figures.update(
            gpu_utilization=gpu.gpu_utilization,
            gpu_memory_used_bytes=gpu.memory_used_bytes,
            power_w=gpu.power_w,
        )
    return {
        name: float(value)
        for name, value in figures.items()
        if value is not None and name not in unmeasured
    }


def float8_figures(
    mfu: float | None,
    *,
    flops_per_step: float | None,
    float8_flops_per_step: float | None,
    peak_tflops: float | None,
    float8_peak_tflops: float | None,
) -> dict[str, float | None]:
    """``float8_share`` and ``precision_mfu`` of a window or of the run, beside its MFU.

    MFU stays counted against the peak of the run's matmul dtype (bf16 under float8
    training), so that runs compare across precisions; these two say what it is counted
    against. With F the step's FLOPs, F8 those of them that ran in float8, P the MFU's
    peak and P8 the fp8 dense peak (the same devices):

    - float8_share = F8 / F (at most 1: F8 counted above F is F);
    - precision_mfu = (F8 / P8 + (F - F8) / P) / step time: the time the step's FLOPs
      take at the peaks they could reach, over the time they took; that is
      mfu x (1 - share + share x P / P8), so it equals mfu at share 0 and is below it
      wherever P8 > P.

    torchtitan reports no MFU under float8 ("not well-defined" with two peaks:
    benchmarks/llama3_h100_202412_torchtitan.md); llm-foundry divides by the fp8 peak
    alone (scripts/train/benchmarking/README.md). Both None where no float8 ran (F8 None
    or 0); precision_mfu None where MFU or either peak is not known.

    Example:
        >>> float8_figures(0.3, flops_per_step=8e12, float8_flops_per_step=6e12,
        ...                peak_tflops=1000.0, float8_peak_tflops=2000.0)
        {'float8_share': 0.75, 'precision_mfu': 0.1875}
    """
    if not float8_flops_per_step or not flops_per_step:
        return {"float8_share": None, "precision_mfu": None}
    share = min(1.0, float8_flops_per_step / flops_per_step)
    precision = (
        mfu * (1.0 - share + share * peak_tflops / float8_peak_tflops)
        if mfu is not None and peak_tflops and float8_peak_tflops
        else None
    )
    return {"float8_share": share, "precision_mfu": precision}
