"""What-if projection: a measured run's step and epoch time on other GPUs, or why not.

One step of the run on `count` GPUs of model X, all figures per step and GPU:

    step_X    = input wait + host + compute_X + exposed all-reduce_X
    compute_X = FLOPs per GPU step / (MFU x peak_X(dtype))
    all-reduce_X = 2 (N - 1) / N x gradient bytes / link bandwidth each way     (N > 1)
    exposed   = max(0, all-reduce_X - 2/3 compute_X)   PyTorch (DDP)
              = all-reduce_X                           TensorFlow (tf.distribute)
    epoch     = steps per epoch x measured GPUs / N x step_X

Input wait and host are the floor: the part of the measured step that a faster GPU's
FLOP/s does not shorten (Amdahl, "Validity of the single processor approach", AFIPS
1967), so no projected step is shorter than it.

- **input wait**: the measured share of the step spent waiting for input, x the step.
- **host**: on a GPU run with NVML samples, the time the GPU sat idle not waiting for
  input: step x (1 - utilisation) - input wait (NVML's utilisation is the share of time
  a kernel was running: `nvmlDeviceGetUtilizationRates`). Elsewhere (a CPU run, no
  NVML samples) a least one: the kernels launched one by one, at least 2 per layer the
  report lists (its forward and its weight gradient) plus one per parameter tensor of a
  for-loop optimizer, x `LAUNCH_GAP_S`; none where tune kept CUDA graphs. A PyTorch run
  that stayed eager (the fit recorded ``compiled`` False) also has its host issue each of
  those ops, `EAGER_DISPATCH_S` apiece: that runs while earlier kernels do, so it is not
  added to the step but bounds it from below (the step is host-bound where it outlasts
  the kernels and their launches).
- **MFU** (FLOPs / (time x peak), PaLM appendix B): the run's own where it was measured
  against a datasheet peak, over the time its kernels computed (step - input wait -
  NVML idle - the all-reduce it waited for); else `DEFAULT_MFU` or `mfu=`: a CPU run's
  efficiency says nothing about a GPU.
- **all-reduce**: data parallel with the run's per-GPU batch; a ring all-reduce moves
  2 (N - 1) / N of the gradients through each GPU each way (Patarasuk and Yuan,
  "Bandwidth optimal all-reduce algorithms", JPDC 2009; nccl-tests' bus bandwidth).
  Gradient bytes are the report's trainable parameter bytes (a gradient has its
  parameter's dtype), else 4 per parameter. The link is the datasheet row's NVLink or
  PCIe figure for that many GPUs (`accelkit.hardware.interconnect.ring_link`), at its
  rated bandwidth: the least the all-reduce can take. DDP all-reduces gradient buckets
  while backward runs (Li et al., "PyTorch Distributed", VLDB 2020), and backward is
  2/3 of a step's FLOPs (4N of 6N per token, PaLM appendix B): only what outlasts it is
  added, the best case. tf.distribute all-reduces in `apply_gradients`, after backward:
  all of it is added.

The terms add up rather than overlap (no max): input wait and NVML idle time were
measured in series with the kernels, and the launch gap is what each launch adds
beyond its kernel even when the host runs ahead. The all-reduce is taken at its best
(rated link bandwidth, hidden behind backward where DDP can hide it), so it is the
least it can cost: a projection it slows is slowed at least that much, and more GPUs
never rank ahead of fewer on an all-reduce the link cannot carry.

Where the model cannot stand behind a figure, `project` returns `NotProjected` with
the reason, and rankings leave it out: no FLOP count, no steps, no steady-state step,
no datasheet peak for the dtype, no parameter count or no link figure for several
GPUs (across servers: the network's bandwidth is in no datasheet row), and a step
bound by its host on X (host > compute_X, or an eager host's issuing of its ops >
compute_X + host: the GPU would wait for the host between kernels, the MFU would not
hold, and how host and GPU overlap there is not measured; the floor is then the least
a step takes).

    >>> run = {"flops_per_step": 1e12, "batch_size": 32, "steps": 100, "framework": "torch",
    ...        "facts": {"parameters": 125_000_000}}
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
from accelkit.hardware.interconnect import ring_link
from accelkit.hardware.what_if import UnknownGPUError, what_if
from accelkit.planning import Precision, Request, plan
from accelkit.specs.types import GpuSpec
from accelkit.utils.units import duration, money

# Projections whose epoch times (or costs, or step times) differ by less than this share
# are equal: the estimate is not that precise.
EQUAL_WITHIN = 0.01

# What a kernel launched on its own costs a step beyond its run: NVIDIA measured 20
# kernels of 2.9 µs launched back to back in one stream at 3.8 µs each, 3.4 µs as one
# CUDA graph (A. Gray, "Getting Started with CUDA Graphs", NVIDIA Technical Blog, 2019,
# https://developer.nvidia.com/blog/cuda-graphs/). A floor: PyTorch's eager dispatch
# adds its own time per op on top, and a step launches more kernels than it counts.
LAUNCH_GAP_S = 3.8e-6 - 2.9e-6

# What the host spends issuing one op from eager PyTorch (Python, the dispatcher, the
# launch): 9.30 µs, the median of 5 x 10,000 one-element ops on an H200's host, PyTorch
# 2.11 (benchmarks/launch_gap.py; benchmarks/results/h200_launch_gap.json), against 1.03 µs
# an op replayed from a CUDA graph. Host time, so it overlaps the kernels already issued.
EAGER_DISPATCH_S = 9.30e-6

# Backward's share of a step's FLOPs: 4N of the 6N per token (PaLM appendix B).
BACKWARD_SHARE = 2 / 3
# Bytes of a gradient where the report counts parameters but not their bytes: float32,
# the dtype mixed precision keeps parameters (and so their gradients) in.
GRADIENT_BYTES = 4


@dataclasses.dataclass(frozen=True)
class Projection:
    """The estimated speed and cost of a measured run on `count` GPUs of another model.

    Attributes:
        gpu, key: the datasheet row's name and key.
        count: GPUs, data parallel.
        dtype: the matmul dtype assumed there; peak_tflops: its dense peak per GPU.
        mfu, mfu_source: the MFU of the kernels assumed, and where it comes from.
        flops_per_step: FLOPs of one step on one GPU.
        input_wait_s: the measured wait for input per step, part of `step_time_s`.
        host_s: the host time per step that a faster GPU does not shorten (NVML idle
            time, or the least launch time), part of `step_time_s`.
        compute_s: the kernels' time per step at `mfu`, part of `step_time_s`.
        allreduce_s: the gradient all-reduce per step (0 on one GPU); exposed_allreduce_s:
            the part of it that backward does not hide, part of `step_time_s`.
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
    host_s: float = 0.0
    compute_s: float = 0.0
    allreduce_s: float = 0.0
    exposed_allreduce_s: float = 0.0

    @property
    def floor_s(self) -> float:
        """The part of `step_time_s` that a faster GPU does not shorten."""
        return self.input_wait_s + self.host_s

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["assumptions"] = list(self.assumptions)
        return {"projected": True, **data, "floor_s": self.floor_s}

    def __str__(self) -> str:
        cost = (
            ""
            if self.cost_per_epoch is None
            else f", {money(self.cost_per_epoch)} per epoch at ${self.price_per_hour:g}/GPU-hour"
        )
        rate = (
            "" if self.samples_per_second is None else f", {self.samples_per_second:,.0f} samples/s"
        )
        parts = [
            (self.input_wait_s, "input wait"),
            (self.host_s, "host"),
            (self.exposed_allreduce_s, "all-reduce"),
        ]
        shares = ", ".join(f"{s / self.step_time_s:.0%} {what}" for s, what in parts if s)
        head = (
            f"what-if: {self.count} x {self.gpu}, {self.dtype} at MFU {self.mfu:.1%}: step "
            f"{duration(self.step_time_s)}{f' ({shares})' if shares else ''}, epoch "
            f"{duration(self.epoch_time_s)} ({self.steps_per_epoch:,.0f} steps){rate}{cost}"
        )
        return head + "".join(f"\n  assumes: {a}" for a in self.assumptions)


@dataclasses.dataclass(frozen=True)
class NotProjected:
    """A projection the model cannot stand behind, and why.

    Attributes:
        gpu, key, count: as in `Projection`.
        reason: why there is no figure, with the numbers it rests on.
        floor_s: the least one step would take there (input wait + host), where known.
        price_per_hour: as given.
    """

    gpu: str
    key: str
    count: int
    reason: str
    floor_s: float | None = None
    price_per_hour: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"projected": False, **dataclasses.asdict(self)}

    def __str__(self) -> str:
        return f"what-if: {self.count} x {self.gpu}: not projected: {self.reason}"


def project(
    report: Mapping[str, Any] | Any,
    gpu: str,
    count: int = 1,
    price_per_hour: float | None = None,
    *,
    mfu: float | None = None,
    precision: str | None = None,
) -> Projection | NotProjected:
    """Estimate a measured run on `count` GPUs called `gpu`, or say why it cannot be.

    Args:
        report: a `RunReport` or its `to_dict()`.
        gpu: a name or alias from the datasheet table (`accelkit specs`).
        count: GPUs, data parallel with the run's per-GPU batch.
        price_per_hour: price of one GPU-hour, for the cost of an epoch.
        mfu: the MFU of the kernels to assume; default the run's own (measured against a
            datasheet peak), else `DEFAULT_MFU`.
        precision: the precision to assume there; default the run's matmul dtype when
            the run was on a GPU and the target has it, else accelkit's plan for the target.

    Returns:
        A `Projection`, or `NotProjected` with the reason where the report or the model
        cannot give a figure (the module docstring lists when).

    Raises:
        UnknownGPUError: no datasheet row for `gpu`.
        ValueError: a bad count, MFU, price or precision.

    Example:
        >>> p = project({"flops_per_step": 1e12, "batch_size": 32, "framework": "torch",
        ...              "steps": 100}, "A100-SXM4-80GB", mfu=0.5)
        >>> round(p.step_time_s * 1e3, 2)  # 1e12 / (0.5 x 312e12) s
        6.41
    """
    data = report.to_dict() if hasattr(report, "to_dict") else dict(report)
    _check(count, mfu, price_per_hour)
    spec, variant, dtype, dtype_note = _target(data, gpu, count, precision)
    peak = spec.peak(dtype)
    if (why_not := _unmeasured(data) or _no_peak(spec, dtype, peak)) or not peak:
        return NotProjected(spec.name, spec.key, count, why_not, None, price_per_hour)
    wait = _input_wait(data)
    host = _host(data, wait)
    chosen_mfu, mfu_source = _mfu(data, mfu, wait, host)
    per_gpu_flops, per_gpu_batch, measured_devices = _per_gpu(data, float(data["flops_per_step"]))
    compute = per_gpu_flops / (chosen_mfu * peak * 1e12)
    allreduce = _allreduce(data, spec, count, compute)
    least = wait + max(host.seconds, host.dispatch_s)  # what no faster GPU shortens
    bound = _host_bound(host, compute, least, mfu_source)
    if isinstance(allreduce, str) or bound:
        why = allreduce if isinstance(allreduce, str) else bound
        return NotProjected(spec.name, spec.key, count, why, least, price_per_hour)
    step = wait + host.seconds + compute + allreduce.exposed
    steps, steps_note = _steps_per_epoch(data, data.get("facts") or {})
    steps_here = steps * measured_devices / count
    epoch = steps_here * step
    assumptions = [
        f"MFU {chosen_mfu:.1%} ({mfu_source})",
        dtype_note,
        _flops_note(per_gpu_flops, per_gpu_batch),
        steps_note,
        *_wait_note(wait),
        *(note for note in (host.note, allreduce.note, variant) if note),
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
        cost_per_epoch=None if price_per_hour is None else epoch / 3600 * price_per_hour * count,
        assumptions=tuple(assumptions),
        host_s=host.seconds,
        compute_s=compute,
        allreduce_s=allreduce.seconds,
        exposed_allreduce_s=allreduce.exposed,
    )


def _target(
    data: Mapping[str, Any], gpu: str, count: int, precision: str | None
) -> tuple[GpuSpec, str, str, str]:
    """The datasheet row of `gpu` (and the variant note where a bare name chose one) and
    the matmul dtype assumed there, with its note.

    Raises:
        UnknownGPUError: no datasheet row for `gpu`.
    """
    spec, variant = specs.resolve(gpu)  # "H100": the most deployed variant, noted
    if spec is None:
        raise UnknownGPUError(specs.unknown_message(gpu))
    dtype, dtype_note = _dtype(data, spec, count, precision)
    return spec, variant or "", dtype, dtype_note


def _flops_note(per_gpu_flops: float, per_gpu_batch: float | None) -> str:
    batch = f", {per_gpu_batch:g} samples per GPU" if per_gpu_batch else ""
    return f"{per_gpu_flops:.3e} FLOPs per GPU step{batch}"


# -- what the report must hold ------------------------------------------------------


def _unmeasured(data: Mapping[str, Any]) -> str:
    """Why the report cannot be projected at all ("" when it can)."""
    if not data.get("flops_per_step"):
        return (
            "the report has no FLOPs per step: the compute cannot be scaled to another GPU "
            "(pass flops_per_step= to the fit)"
        )
    steps = data.get("steps") or 0
    facts = data.get("facts") or {}
    if not steps and not facts.get("steps_per_epoch"):
        return "the report has no steps: there is no epoch to time"
    if steps and data.get("steady_steps") == 0 and data.get("step_time_s") is None:
        return (
            f"the run measured no steady-state step (its {steps} step(s) were all warm-up): "
            "no step time, input wait or host time to project from; run more steps"
        )
    return ""


def _no_peak(spec: GpuSpec, dtype: str, peak: float | None) -> str:
    if peak:
        return ""
    why = f": {spec.notes}" if spec.peaks_unknown and spec.notes else ""
    return f"{spec.name} has no dense {dtype} peak in its datasheet row{why}"


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


# -- the floor: what a faster GPU does not shorten ----------------------------------


@dataclasses.dataclass(frozen=True)
class _Host:
    """The host time per step a faster GPU does not shorten, as assumed.

    `measured`: NVML's idle time of the run's own GPU (True), or a least launch time
    (False); `what` names it in a sentence, `note` is the assumption's text.
    `dispatch_s`: the least time an eager PyTorch host takes to issue the step's ops
    (0 where the run was compiled, graphed, measured by NVML or not known to be eager),
    which overlaps the kernels; `dispatch_what` names it.
    """

    seconds: float
    measured: bool
    what: str
    note: str
    dispatch_s: float = 0.0
    dispatch_what: str = ""


def _input_wait(data: Mapping[str, Any]) -> float:
    return float(data.get("input_wait_share") or 0.0) * float(data.get("step_time_s") or 0.0)


def _wait_note(wait: float) -> list[str]:
    if not wait:
        return []
    text = (
        f"{duration(wait)} per step waiting for input, as measured (host-side: a faster GPU "
        "does not shorten it)"
    )
    return [text]


def _host(data: Mapping[str, Any], wait: float) -> _Host:
    """The measured GPU idle time per step where NVML sampled it, else the least launch
    time of the step's kernels."""
    util = data.get("gpu_utilization")
    step = float(data.get("step_time_s") or 0.0)
    if util is None or not step:
        return _launches(data)
    busy = min(step * float(util) / 100, step - wait)
    idle = max(0.0, step - wait - busy)
    return _Host(
        idle,
        True,
        f"{duration(idle)} a step the run's GPU sat idle, not waiting for input",
        f"{duration(idle)} per step of host time, the measured GPU's idle time not spent "
        f"waiting for input: {duration(step)} x (1 - {float(util):.0f}% NVML utilisation) - "
        f"{duration(wait)} input wait, on {data.get('device')} (a faster GPU does not "
        "shorten it)",
    )


def _launches(data: Mapping[str, Any]) -> _Host:
    """At least `LAUNCH_GAP_S` per kernel launched: 2 per listed layer (forward, weight
    gradient) and one per parameter tensor of a for-loop optimizer (not compiled)."""
    if (data.get("tuning") or {}).get("cudagraphs"):
        return _Host(
            0.0,
            False,
            "",
            "no launch time counted: tune kept CUDA graphs, which "
            "replay the step's kernels in one launch",
        )
    facts = data.get("facts") or {}
    layers = len(facts.get("layers") or ())
    optimizer = facts.get("optimizer") or {}
    looped = optimizer.get("implementation") == "for-loop" and not facts.get("compiled")
    tensors = int(optimizer.get("parameter_tensors") or 0) if looped else 0
    kernels = 2 * layers + tensors
    if not kernels:
        return _Host(
            0.0,
            False,
            "",
            "no host time counted: the report has neither NVML utilisation nor the model's layers",
        )
    seconds = kernels * LAUNCH_GAP_S
    counted = f"2 for each of the {layers} layers listed (forward, weight gradient)" + (
        f" and {tensors} for the for-loop optimizer's parameter tensors" if tensors else ""
    )
    note = (
        f"at least {duration(seconds)} per step of host time launching kernels one by "
        f"one: {kernels} kernels ({counted}) x {LAUNCH_GAP_S * 1e6:.1f} µs each, what a "
        "launch costs beyond its kernel (NVIDIA, Getting Started with CUDA Graphs, 2019: "
        "3.8 µs per 2.9 µs kernel)"
    )
    eager = data.get("framework") == "torch" and facts.get("compiled") is False
    dispatch = kernels * EAGER_DISPATCH_S if eager else 0.0
    if eager:
        note += (
            f"; the run was eager, so its host also takes at least {duration(dispatch)} a "
            f"step to issue them, {EAGER_DISPATCH_S * 1e6:.2f} µs an op (measured on an "
            "H200's host, benchmarks/launch_gap.py), while earlier kernels run"
        )
    return _Host(
        seconds,
        False,
        f"least time to launch its {kernels} kernels one by one ({duration(seconds)})",
        note,
        dispatch,
        f"least time an eager PyTorch host takes to issue its {kernels} ops "
        f"({duration(dispatch)}, {EAGER_DISPATCH_S * 1e6:.2f} µs an op)"
        if eager
        else "",
    )


def _host_bound(host: _Host, compute: float, floor: float, mfu_source: str) -> str:
    """Why a step whose host time outlasts its kernels gets no figure ("" where it does
    not: the kernels outlast the host): its launches in series with them, or an eager
    host's issuing of its ops beside them."""
    if host.dispatch_s > compute + host.seconds:  # more than the launches' bound when eager
        gpu, what = "its kernels and their launches", host.dispatch_what
        compute += host.seconds  # the launches run in series with the kernels
    elif host.seconds > compute:
        gpu, what = "its kernels", host.what
    else:
        return ""
    assumed = "" if "measured" in mfu_source else " at an MFU no GPU measured for this run"
    return (
        f"host-bound: {gpu} would take {duration(compute)} a "
        f"step{assumed}, less than the {what}: the step would follow the host, not "
        f"the GPU's FLOP/s, and how the two overlap there is not measured; at least "
        f"{duration(floor)} a step. Cut the host time first (torch.compile, CUDA graphs, "
        "a larger batch)"
    )


# -- the kernels ----------------------------------------------------------------------


def _mfu(
    data: Mapping[str, Any], given: float | None, wait: float, host: _Host
) -> tuple[float, str]:
    """The MFU of the kernels, and where it comes from."""
    if given is not None:
        return float(given), "given"
    measured = data.get("mfu")
    if not measured:
        return DEFAULT_MFU, (
            "assumed, typical of well-tuned training: the run had no MFU against a "
            "GPU datasheet peak (pass mfu= to change it)"
        )
    step = float(data.get("step_time_s") or 0.0)
    allreduce = float(data.get("communication_s") or 0.0)
    idle = host.seconds if host.measured else 0.0
    kernels = step - wait - idle - allreduce
    if not step or kernels <= 0 or kernels >= step:
        return float(measured), f"the run's, measured on {data.get('device')}"
    taken = [
        what
        for seconds, what in ((wait, "input wait"), (idle, "GPU idle"), (allreduce, "all-reduce"))
        if seconds
    ]
    return min(float(measured) * step / kernels, 1.0), (
        f"the run's, measured on {data.get('device')}, over the {duration(kernels)} of its "
        f"{duration(step)} step its kernels computed (without {', '.join(taken)}): "
        f"{measured:.1%} x {step / kernels:.3f}"
    )


def _per_gpu(data: Mapping[str, Any], flops: float) -> tuple[float, float | None, int]:
    """The measured run per GPU: FLOPs and samples of one GPU's step (a process that drove
    several GPUs split its step among them), and the GPUs the run measured in all."""
    facts = data.get("facts") or {}
    devices = int(facts.get("devices_used") or 1)
    batch = float(facts.get("batch_size") or data.get("batch_size") or 0)
    measured_devices = devices * int(data.get("world_size") or 1)
    return flops / devices, batch / devices or None, measured_devices


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


# -- the all-reduce -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _AllReduce:
    """One step's gradient all-reduce: all of it, the part backward does not hide, and
    the assumption's text ("" on one GPU)."""

    seconds: float
    exposed: float
    note: str


_ONE_GPU = _AllReduce(0.0, 0.0, "")


def _allreduce(
    data: Mapping[str, Any], spec: GpuSpec, count: int, compute: float
) -> _AllReduce | str:
    """The gradient all-reduce of one step on `count` GPUs, or why it cannot be estimated."""
    if count == 1:
        return _ONE_GPU
    size, size_note = _gradient_bytes(data.get("facts") or {})
    if size is None:
        return (
            f"the report counts no parameters: the gradient all-reduce over {count} GPUs "
            "cannot be estimated"
        )
    link = ring_link(spec, count)
    if link.gbps_each_way is None:
        return f"the gradient all-reduce over {count} x {spec.name} has no figure: {link.why}"
    seconds = 2 * (count - 1) / count * size / (link.gbps_each_way * 1e9)
    if str(data.get("framework") or "torch") == "torch":
        backward = BACKWARD_SHARE * compute
        exposed = max(0.0, seconds - backward)
        adds = f"{duration(exposed)} of it adds to the step" if exposed else "none of it adds"
        overlap = f"DDP overlaps it with backward ({duration(backward)}) at best: {adds}"
    else:
        exposed = seconds
        overlap = "tf.distribute runs it after backward: all of it adds to the step"
    return _AllReduce(
        seconds,
        exposed,
        f"data parallel over {count} GPUs: a ring all-reduce of {size_note} a step, "
        f"2 x ({count} - 1) / {count} of it each way over {link.why}: {duration(seconds)}; "
        f"{overlap}",
    )


def _gradient_bytes(facts: Mapping[str, Any]) -> tuple[float | None, str]:
    """The gradients' bytes per step, and how they were counted."""
    if facts.get("parameter_bytes"):
        size = float(facts["parameter_bytes"])
        return size, f"{size / 1e6:,.4g} MB of gradients (the trainable parameters' bytes)"
    if facts.get("parameters"):
        size = float(facts["parameters"]) * GRADIENT_BYTES
        return size, (
            f"{size / 1e6:,.4g} MB of gradients ({float(facts['parameters']):,.0f} "
            f"parameters x {GRADIENT_BYTES} bytes, float32)"
        )
    return None, ""


# -- the epoch ------------------------------------------------------------------------


def _steps_per_epoch(data: Mapping[str, Any], facts: Mapping[str, Any]) -> tuple[float, str]:
    if facts.get("steps_per_epoch"):
        steps = float(facts["steps_per_epoch"])
        return steps, f"{steps:,.0f} steps per epoch on the measured devices (counted)"
    steps = float(data.get("steps") or 0)
    return steps, (
        f"one 'epoch' is the measured run's {steps:,.0f} steps (steps per epoch unknown)"
    )


# -- ranking -------------------------------------------------------------------------


def projected(found: Sequence[Projection | NotProjected]) -> list[Projection]:
    """The projections with a figure, in the order given."""
    return [p for p in found if isinstance(p, Projection)]


def not_projected(found: Sequence[Projection | NotProjected]) -> list[NotProjected]:
    """The projections without a figure, in the order given."""
    return [p for p in found if isinstance(p, NotProjected)]


def ranked(
    projections: Sequence[Projection | NotProjected],
) -> list[tuple[Projection, int, int | None]]:
    """The projections with a figure, fastest first, each with its rank by time and by
    cost (None: no price). `NotProjected` ones are left out: there is nothing to rank.

    Equal epoch times (or costs) share a rank, the next one skipping as many ("1, 1, 3"):
    8 x H100 SXM and 8 x H200 have the same peaks, so at one MFU neither is faster.

    Example:
        >>> run = {"flops_per_step": 1e12, "steps": 100}
        >>> found = [project(run, "Tesla T4", price_per_hour=0.35), project(run, "L4")]
        >>> [(p.key, by_time, by_cost) for p, by_time, by_cost in ranked(found)]
        [('l4', 1, None), ('t4', 2, 1)]
    """
    figures = projected(projections)
    by_time = sorted(figures, key=lambda p: p.epoch_time_s)
    priced = sorted(
        (p for p in figures if p.cost_per_epoch is not None),
        key=lambda p: p.cost_per_epoch or 0.0,  # priced ones only: never None
    )
    time_rank = _ranks(by_time, lambda p: p.epoch_time_s)
    cost_rank = _ranks(priced, lambda p: p.cost_per_epoch or 0.0)
    return [(p, time_rank[id(p)], cost_rank.get(id(p))) for p in by_time]


def to_json(found: Sequence[Projection | NotProjected]) -> list[dict[str, Any]]:
    """The projections as ``--json`` lists them: those with a figure fastest first with
    ``rank_by_time`` and ``rank_by_cost``, then the others with ``projected: false``,
    their ``reason`` and null ranks."""
    ranks = [{**p.to_dict(), "rank_by_time": t, "rank_by_cost": c} for p, t, c in ranked(found)]
    left = [
        {**p.to_dict(), "rank_by_time": None, "rank_by_cost": None} for p in not_projected(found)
    ]
    return ranks + left


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


def leaders(projections: Sequence[Projection | NotProjected]) -> list[str]:
    """The lines naming the fastest and the cheapest projections with a figure. Several
    sharing the first place are named together as equal, never one of them as the
    fastest; a fastest one whose step takes as long as others' is said to lead by its GPU
    count alone. Where some have no figure (`NotProjected`), the lines say "of those
    projected": nothing is known of the others' speed.

    Example:
        >>> run = {"flops_per_step": 1e12, "steps": 100, "facts": {"parameters": 1e8}}
        >>> leaders([project(run, "H100 SXM", 8), project(run, "H200", 8)])
        ['equally fast: 8 x NVIDIA H100 SXM5 80GB, 8 x NVIDIA H200 SXM 141GB (same epoch time)']
    """
    order = ranked(projections)
    fastest = [p for p, by_time, _ in order if by_time == 1]
    cheapest = [p for p, _, by_cost in order if by_cost == 1]
    among = " of those projected" if not_projected(projections) else ""
    lines = (
        _first(fastest, f"fastest{among}", f"equally fast{among}", "epoch time")
        + _by_count(fastest, order),
        _first(
            cheapest,
            f"cheapest per epoch{among}",
            f"equally cheap per epoch{among}",
            "cost per epoch",
        ),
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
