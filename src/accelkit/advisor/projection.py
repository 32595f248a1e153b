"""What-if projection: a measured run's step and epoch time on other GPUs, at the same MFU.

MFU = FLOPs per step / (step time x peak) (PaLM, appendix B), so on GPU X

    step time = FLOPs per device step / (MFU x peak_X(dtype)) + input wait per step

The MFU is the run's own when it was measured against a datasheet peak, taken
over the time not spent waiting for input (mfu / (1 - input share)), else an
assumed one (`DEFAULT_MFU`, or `mfu=`): a CPU run's efficiency says nothing
about a GPU. The input wait per step is the measured one: the host prepares
batches no faster on a faster GPU. Several GPUs are data parallel with the
same per-GPU batch and perfect scaling, so an epoch takes steps_per_epoch x
measured devices / N steps. Every projection lists these assumptions.

    >>> run = {"flops_per_step": 1e12, "batch_size": 32, "steps": 100, "framework": "torch"}
    >>> print(project(run, "H100 SXM", count=8, price_per_hour=2.5))  # doctest: +ELLIPSIS
    what-if: 8 x NVIDIA H100 SXM5 80GB, ...
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from accelkit import specs
from accelkit.advisor.context import DEFAULT_MFU, Context
from accelkit.hardware.what_if import UnknownGPUError, what_if
from accelkit.planning import Precision, Request, plan
from accelkit.utils.units import duration, money

# Projections whose epoch times (or costs, or step times) differ by less than this share
# are equal: the estimate is not that precise.
EQUAL_WITHIN = 0.01


@dataclasses.dataclass(frozen=True)
class Projection:
    """The estimated speed and cost of a measured run on `count` GPUs of another model.

    Attributes:
        gpu, key: the datasheet row's name and key.
        count: GPUs, data parallel.
        dtype: the matmul dtype assumed there; peak_tflops: its dense peak per GPU.
        mfu, mfu_source: the MFU assumed, and where it comes from.
        flops_per_step: FLOPs of one step on one GPU.
        input_wait_s: the measured wait for input per step, part of `step_time_s`.
        step_time_s: one step on one GPU (all GPUs step together).
        samples_per_second: across the `count` GPUs, when the batch is known.
        steps_per_epoch: steps of one epoch on `count` GPUs; epoch_time_s: their time.
        price_per_hour: per GPU-hour, when given; cost_per_epoch: epoch hours x price x count.
        assumptions: what the estimate rests on, in words.
    """

    gpu: str
    key: str
    count: int
    dtype: str
    peak_tflops: float
    mfu: float
    mfu_source: str
    flops_per_step: float
    input_wait_s: float
    step_time_s: float
    samples_per_second: float | None
    steps_per_epoch: float
    epoch_time_s: float
    price_per_hour: float | None = None
    cost_per_epoch: float | None = None
    assumptions: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["assumptions"] = list(self.assumptions)
        return data

    def __str__(self) -> str:
        cost = (
            ""
            if self.cost_per_epoch is None
            else f", {money(self.cost_per_epoch)} per epoch at ${self.price_per_hour:g}/GPU-hour"
        )
        rate = (
            "" if self.samples_per_second is None else f", {self.samples_per_second:,.0f} samples/s"
        )
        wait = (
            f" ({self.input_wait_s / self.step_time_s:.0%} input wait)" if self.input_wait_s else ""
        )
        head = (
            f"what-if: {self.count} x {self.gpu}, {self.dtype} at MFU {self.mfu:.1%}: step "
            f"{duration(self.step_time_s)}{wait}, epoch {duration(self.epoch_time_s)} "
            f"({self.steps_per_epoch:,.0f} steps){rate}{cost}"
        )
        return head + "".join(f"\n  assumes: {a}" for a in self.assumptions)


def project(
    report: Mapping[str, Any] | Any,
    gpu: str,
    count: int = 1,
    price_per_hour: float | None = None,
    *,
    mfu: float | None = None,
    precision: str | None = None,
) -> Projection:
    """Estimate a measured run on `count` GPUs called `gpu`.

    Args:
        report: a `RunReport` or its `to_dict()`; needs `flops_per_step`.
        gpu: a name or alias from the datasheet table (`accelkit specs`).
        count: GPUs, data parallel with the run's per-GPU batch.
        price_per_hour: price of one GPU-hour, for the cost of an epoch.
        mfu: the MFU of the compute (input wait excluded) to assume; default the run's
            own (measured against a datasheet peak), else `DEFAULT_MFU`.
        precision: the precision to assume there; default the run's matmul dtype when
            the run was on a GPU and the target has it, else accelkit's plan for the target.

    Raises:
        UnknownGPUError: no datasheet row for `gpu`.
        ValueError: the report has no FLOP count, or a bad count, MFU or precision.

    Example:
        >>> p = project({"flops_per_step": 1e12, "batch_size": 32, "framework": "torch",
        ...              "steps": 100}, "A100-SXM4-80GB", mfu=0.5)
        >>> round(p.step_time_s * 1e3, 2)  # 1e12 / (0.5 x 312e12) s
        6.41
    """
    data = report.to_dict() if hasattr(report, "to_dict") else dict(report)
    _check(count, mfu, price_per_hour)
    flops = data.get("flops_per_step")
    if not flops:
        raise ValueError(
            "projection needs the run's FLOPs per step, which this report lacks "
            "(pass flops_per_step= to the fit)"
        )
    spec, variant, dtype, dtype_note, peak = _target(data, gpu, count, precision)
    share = float(data.get("input_wait_share") or 0.0)
    wait = share * float(data.get("step_time_s") or 0.0)
    chosen_mfu, mfu_source = _mfu(data, mfu, share)
    per_gpu_flops, per_gpu_batch, measured_devices = _per_gpu(data, float(flops))
    step = per_gpu_flops / (chosen_mfu * peak * 1e12) + wait
    steps, steps_note = _steps_per_epoch(data, data.get("facts") or {})
    steps_here = steps * measured_devices / count
    epoch = steps_here * step
    cost = None if price_per_hour is None else epoch / 3600 * price_per_hour * count
    assumptions = [
        f"MFU {chosen_mfu:.1%} ({mfu_source})",
        dtype_note,
        f"{per_gpu_flops:.3e} FLOPs per GPU step"
        + (f", {per_gpu_batch:g} samples per GPU" if per_gpu_batch else ""),
        steps_note,
        *_input_and_scaling(wait, count, measured_devices),
        *([variant] if variant else []),
    ]
    return Projection(
        gpu=spec.name,
        key=spec.key,
        count=count,
        dtype=dtype,
        peak_tflops=peak,
        mfu=chosen_mfu,
        mfu_source=mfu_source,
        flops_per_step=per_gpu_flops,
        input_wait_s=wait,
        step_time_s=step,
        samples_per_second=per_gpu_batch * count / step if per_gpu_batch else None,
        steps_per_epoch=steps_here,
        epoch_time_s=epoch,
        price_per_hour=price_per_hour,
        cost_per_epoch=cost,
        assumptions=tuple(assumptions),
    )


def _target(
    data: Mapping[str, Any], gpu: str, count: int, precision: str | None
) -> tuple[Any, str, str, str, float]:
    """The GPU projected to: its datasheet row, which variant a bare name like "H100"
    was taken for ("" for a full name), the matmul dtype assumed there and why, and
    that dtype's dense peak.

    Raises:
        UnknownGPUError: no datasheet row for `gpu`.
        ValueError: no dense peak for the dtype (or a bad precision).
    """
    spec, variant = specs.resolve(gpu)  # "H100": the most deployed variant, noted
    if spec is None:
        raise UnknownGPUError(specs.unknown_message(gpu))
    dtype, dtype_note = _dtype(data, spec, count, precision)
    peak = spec.peak(dtype)
    if not peak:
        raise ValueError(f"{spec.name} has no dense {dtype} peak in its datasheet")
    return spec, variant, dtype, dtype_note, peak


def _per_gpu(data: Mapping[str, Any], flops: float) -> tuple[float, float | None, int]:
    """The measured run per GPU: FLOPs and samples of one GPU's step (a process that drove
    several GPUs split its step among them), and the GPUs the run measured in all."""
    facts = data.get("facts") or {}
    devices = int(facts.get("devices_used") or 1)
    batch = float(facts.get("batch_size") or data.get("batch_size") or 0)
    measured_devices = devices * int(data.get("world_size") or 1)
    return flops / devices, batch / devices or None, measured_devices


def _input_and_scaling(wait: float, count: int, measured_devices: int) -> list[str]:
    """The assumptions about the input wait and data parallelism, where they apply."""
    notes = []
    if wait:
        notes.append(
            f"{duration(wait)} per step waiting for input, as measured "
            "(host-side: a faster GPU does not shorten it)"
        )
    if count > 1 or measured_devices > 1:
        notes.append(
            f"data parallel over {count} GPU(s) with perfect scaling "
            "(NCCL all-reduce adds a few percent)"
        )
    return notes


def _check(count: int, mfu: float | None, price_per_hour: float | None) -> None:
    """Raise ValueError for a bad count, MFU or price, naming the valid ones."""
    # Callers without a type checker pass anything; True is an int to Python, not a count.
    if (
        isinstance(count, bool)
        or not isinstance(count, int)  # type: ignore[redundant-expr]
        or count < 1
    ):
        raise ValueError(f"count={count!r} is not valid; use a whole number >= 1")
    if mfu is not None and not 0 < mfu <= 1:  # NaN fails this too
        raise ValueError(f"mfu={mfu!r} must be in (0, 1]")
    if price_per_hour is not None and not (math.isfinite(price_per_hour) and price_per_hour >= 0):
        raise ValueError(f"price_per_hour={price_per_hour!r} must be a finite number >= 0")


def _dtype(
    data: Mapping[str, Any], spec: Any, count: int, precision: str | None
) -> tuple[str, str]:
    """The matmul dtype assumed on `count` x `spec`, and why: the one asked, else the
    measured run's when it ran on a GPU and `spec` has it, else accelkit's plan's."""
    framework = str(data.get("framework") or "torch")
    on_gpu = data.get("mfu") is not None
    target = plan(
        what_if(spec.key, count), Request(framework=framework, precision=precision or "auto")
    )
    planned = _counted(Context.build(target.hardware, target, {}).matmul_dtype)
    if precision:
        note = _FLOAT8_NOTE if target.precision is Precision.FP8 else ""
        return planned, f"matmuls in {planned} (precision={precision!r} asked{note})"
    measured = _counted(str(data.get("matmul_dtype") or ""))
    if on_gpu and spec.peak(measured):
        return measured, f"matmuls in {measured}, as in the measured run"
    why = (
        "the run was not measured on a GPU" if not on_gpu else f"{spec.name} has no {measured} path"
    )
    return planned, f"matmuls in {planned}: accelkit's plan for this GPU ({why})"


# float8 covers a step's large linear layers only, and MFU is counted against the bf16
# peak under it (accelkit.profiling.mfu): a projection does the same.
_FLOAT8_NOTE = (
    ": float8 runs the large linear layers only, its gain measured per model by tune, so "
    "the step is counted at the bf16 peak as MFU is"
)


def _counted(dtype: str) -> str:
    """The dtype whose peak a step is counted at: bf16 for a float8 run."""
    return "bf16" if dtype == "fp8" else dtype


def _mfu(data: Mapping[str, Any], mfu: float | None, share: float) -> tuple[float, str]:
    if mfu is not None:
        return float(mfu), "given"
    measured = data.get("mfu")
    if measured:
        if not share:
            return float(measured), f"the run's, measured on {data.get('device')}"
        compute = min(float(measured) / max(1.0 - share, 1e-9), 1.0)
        return compute, (
            f"the run's, measured on {data.get('device')}, over the time not "
            f"spent waiting for input: {measured:.1%} / (1 - {share:.3f})"
        )
    return DEFAULT_MFU, (
        "assumed, typical of well-tuned training: the run had no MFU against a "
        "GPU datasheet peak (pass mfu= to change it)"
    )


def _steps_per_epoch(data: Mapping[str, Any], facts: Mapping[str, Any]) -> tuple[float, str]:
    if facts.get("steps_per_epoch"):
        steps = float(facts["steps_per_epoch"])
        return steps, f"{steps:,.0f} steps per epoch on the measured devices (counted)"
    steps = float(data.get("steps") or 0)
    if not steps:
        raise ValueError("projection needs the run's steps; this report has none")
    return steps, (
        f"one 'epoch' is the measured run's {steps:,.0f} steps (steps per epoch unknown)"
    )


# -- ranking -------------------------------------------------------------------------


def ranked(projections: Sequence[Projection]) -> list[tuple[Projection, int, int | None]]:
    """The projections fastest first, each with its rank by time and by cost (None: no price).

    Equal epoch times (or costs) share a rank, the next one skipping as many ("1, 1, 3"):
    8 x H100 SXM and 8 x H200 have the same peaks, so at one MFU neither is faster.

    Example:
        >>> run = {"flops_per_step": 1e12, "steps": 100}
        >>> found = [project(run, "Tesla T4", price_per_hour=0.35), project(run, "L4")]
        >>> [(p.key, by_time, by_cost) for p, by_time, by_cost in ranked(found)]
        [('l4', 1, None), ('t4', 2, 1)]
    """
    by_time = sorted(projections, key=lambda p: p.epoch_time_s)
    priced = sorted(
        (p for p in projections if p.cost_per_epoch is not None),
        key=lambda p: p.cost_per_epoch or 0.0,  # priced ones only: never None
    )
    time_rank = _ranks(by_time, lambda p: p.epoch_time_s)
    cost_rank = _ranks(priced, lambda p: p.cost_per_epoch or 0.0)
    return [(p, time_rank[id(p)], cost_rank.get(id(p))) for p in by_time]


def _ranks(ordered: Sequence[Projection], figure: Any) -> dict[int, int]:
    """Competition ranks of `ordered` (sorted by `figure`): figures equal to the one
    holding a rank (`_equal`) share it."""
    ranks: dict[int, int] = {}
    holder: Projection | None = None
    for place, p in enumerate(ordered, 1):
        if holder is None or not _equal(figure(holder), figure(p)):
            holder = p
            ranks[id(p)] = place
        else:
            ranks[id(p)] = ranks[id(holder)]
    return ranks


def _equal(a: float, b: float) -> bool:
    # A projection rests on an assumed MFU and a measured input wait: figures this close
    # are the same estimate, and naming one of them faster would be noise.
    return math.isclose(a, b, rel_tol=EQUAL_WITHIN)


def leaders(projections: Sequence[Projection]) -> list[str]:
    """The lines naming the fastest and the cheapest projections. Several sharing the
    first place are named together as equal, never one of them as the fastest; a fastest
    one whose step takes as long as others' is said to lead by its GPU count alone.

    Example:
        >>> run = {"flops_per_step": 1e12, "steps": 100}
        >>> leaders([project(run, "H100 SXM", 8), project(run, "H200", 8)])
        ['equally fast: 8 x NVIDIA H100 SXM5 80GB, 8 x NVIDIA H200 SXM 141GB (same epoch time)']
    """
    order = ranked(projections)
    fastest = [p for p, by_time, _ in order if by_time == 1]
    cheapest = [p for p, _, by_cost in order if by_cost == 1]
    lines = (
        _first(fastest, "fastest", "equally fast", "epoch time") + _by_count(fastest, order),
        _first(cheapest, "cheapest per epoch", "equally cheap per epoch", "cost per epoch"),
    )
    return [line for line in lines if line]


def _first(first: Sequence[Projection], alone: str, tied: str, figure: str) -> str:
    names = ", ".join(f"{p.count} x {p.gpu}" for p in first)
    if len(first) > 1:
        return f"{tied}: {names} (same {figure})"
    return f"{alone}: {names}" if first else ""


def _by_count(
    fastest: Sequence[Projection], order: Sequence[tuple[Projection, int, int | None]]
) -> str:
    """Why a lone fastest projection leads when its step is no faster than others'."""
    if len(fastest) != 1:
        return ""
    lead = fastest[0]
    same = [p for p, *_ in order if p is not lead and _equal(p.step_time_s, lead.step_time_s)]
    if not same:
        return ""
    return (
        f" (its step takes {duration(lead.step_time_s)}, as on {len(same)} other(s): "
        f"it leads by its {lead.count} GPUs alone)"
    )
