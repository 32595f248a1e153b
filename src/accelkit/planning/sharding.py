"""Memory decides the parallelism: data-parallel when the model fits each GPU whole,
FSDP2 when sharding makes it fit, activation checkpointing when the activations do
not, CPU offload last, and a refusal with the numbers when nothing fits.

The order, and why: a replica per GPU (DDP) costs one all-reduce of the gradients per
step; FSDP2 moves 1.5 times that (ZeRO-3's 3 x params against DDP's 2 x params,
Rajbhandari et al. 2020, section 7), mostly hidden behind compute within a server;
checkpointing recomputes the forward pass (about a third more FLOPs, Chen et al.
2016); offload moves the state over PCIe every step, slower than any of them.
TensorFlow's strategies (Mirrored, MultiWorkerMirrored) replicate the whole state on
each GPU; accelkit plans no sharding for TensorFlow and says so with the numbers.
"""

from __future__ import annotations

import dataclasses

from accelkit.hardware.info import HardwareInfo
from accelkit.hardware.what_if import MAX_GPUS
from accelkit.planning.keys import Key
from accelkit.planning.memory import (
    ACTIVATION_SHARE,
    HEADROOM,
    Footprint,
    Layout,
    PerParam,
    activation_reserve,
    footprint,
    per_param,
    usable_bytes,
)
from accelkit.planning.types import (
    MAX_PARAMS,
    Distribution,
    Framework,
    MemoryEstimate,
    Plan,
    Precision,
    Request,
    Setting,
)
from accelkit.utils.units import gigabytes

REFUSED = "does not fit"


def gpus_to_shard_over(hardware: HardwareInfo, request: Request) -> int:
    """The GPUs one model's state can be spread over: the launcher's processes, else
    the GPUs here (a what-if plans the torchrun launch it advises); 1 without a
    distribution (``distribute="none"``, MIG slices, no GPU)."""
    if request.distribute is Distribution.NONE or hardware.mig_enabled or not hardware.gpus:
        return 1
    launcher = hardware.launcher
    if request.framework is Framework.TORCH and (launcher.torchrun or launcher.slurm):
        return max(1, launcher.world_size or 1)
    return hardware.gpu_count


def choose(
    hardware: HardwareInfo, request: Request, precision: Precision
) -> tuple[MemoryEstimate | None, list[Setting]]:
    """The layout of the model's state and its settings; (None, []) without `params`.

    Example:
        >>> from accelkit import what_if
        >>> estimate, _ = choose(what_if("H100", 8), Request(params=8e9), Precision.BF16)
        >>> estimate.choice, round(estimate.state_bytes / 1e9, 1)
        ('fsdp2', 128.0)
    """
    if request.params is None:
        return None, []
    model = _Model.of(hardware, request, precision)
    layouts = _candidates(request, model.gpus)
    chosen = _first_fit(model, layouts)
    if model.usable is None:
        chosen = layouts[0]  # nothing to compare with: the plain layout, said so
    estimate = model.estimate(chosen, layouts)
    return estimate, _settings(estimate, chosen, request.framework)


def _first_fit(model: _Model, layouts: list[Layout]) -> Layout | None:
    """The first layout that fits. With activations unknown, a layout on the GPUs that
    leaves them `ACTIVATION_SHARE` of the memory comes before one that fits with less
    (FSDP2 before a replica that leaves them nothing); CPU offload stays the last resort."""
    on_gpus = (layout for layout in layouts if not layout.offload)
    roomy = next((layout for layout in on_gpus if model.leaves_room(layout)), None)
    return roomy or next((layout for layout in layouts if model.fits(layout)), None)


def _candidates(request: Request, gpus: int) -> list[Layout]:
    """Layouts in the order of preference (the module docstring says why)."""
    if request.framework is Framework.TENSORFLOW:
        return [Layout()]
    known = request.activation_bytes is not None
    out = [Layout(), Layout(gpus)] if gpus > 1 else [Layout()]
    if known:
        out += [Layout(1, checkpointing=True)]
        out += [Layout(gpus, checkpointing=True)] if gpus > 1 else []
    out += [Layout(gpus, offload=True)]
    out += [Layout(gpus, checkpointing=True, offload=True)] if known else []
    if request.distribute is Distribution.FSDP:
        out = [layout for layout in out if layout.sharded] or [Layout(gpus)]
    elif request.distribute is Distribution.DDP:  # asked for: a whole replica, or refused
        out = [layout for layout in out if not layout.sharded]
    return out


class _Model:
    """One request's model against one machine: sizes, and what fits."""

    def __init__(
        self, hardware: HardwareInfo, request: Request, precision: Precision, gpus: int
    ) -> None:
        assert request.params is not None
        self.hardware, self.request, self.precision, self.gpus = hardware, request, precision, gpus
        self.params = request.params
        self.trainable = (
            request.params if request.trainable_params is None else request.trainable_params
        )
        self.sizes: PerParam = per_param(
            request.optimizer, precision, request.framework, request.frozen_dtype
        )
        # the smallest GPU bounds every rank; one of unknown memory leaves it unknown
        memories = [gpu.memory_bytes for gpu in hardware.gpus if gpu.memory_bytes]
        known = hardware.gpus and len(memories) == len(hardware.gpus)
        self.device = min(memories) if known else None
        self.usable = None if self.device is None else usable_bytes(self.device)
        self.host = hardware.host_memory_bytes
        self.gpu_name = hardware.gpus[0].name if hardware.gpus else "no GPU"

    @classmethod
    def of(cls, hardware: HardwareInfo, request: Request, precision: Precision) -> _Model:
        return cls(hardware, request, precision, gpus_to_shard_over(hardware, request))

    def footprint(self, layout: Layout, params: int | None = None) -> Footprint:
        scale = 1.0 if params is None else params / self.params
        return footprint(
            layout,
            self.sizes,
            params or self.params,
            round(self.trainable * scale),
            self.request.activation_bytes,
        )

    @property
    def state(self) -> int:
        return self.footprint(Layout()).state

    def host_fits(self, layout: Layout) -> bool:
        return not layout.offload or self.host is None or self.state <= self.host

    def fits(self, layout: Layout) -> bool:
        if self.usable is None or not self.host_fits(layout):
            return False
        return self.footprint(layout).total <= self.usable

    @property
    def reserve(self) -> int:
        """Bytes kept for activations not yet measured (0 once they are given)."""
        unknown = self.request.activation_bytes is None
        return activation_reserve(self.usable) if unknown and self.usable is not None else 0

    def leaves_room(self, layout: Layout) -> bool:
        """`layout` fits and leaves the activations room (`reserve`) when they are unknown."""
        if not self.fits(layout):
            return False
        assert self.usable is not None
        return self.footprint(layout).total <= self.usable - self.reserve

    def largest(self, layout: Layout) -> int:
        """The most parameters `layout` fits here (0: none), by bisection."""
        if self.usable is None:
            return 0
        lo, hi = 0, MAX_PARAMS
        while hi - lo > max(1, lo // 1000):
            mid = (lo + hi) // 2
            if mid and self.footprint(layout, mid).total <= self.usable:
                lo = mid
            else:
                hi = mid
        return lo

    def largest_held(self, layouts: list[Layout]) -> int:
        """The most parameters these GPUs hold in the layouts without offload (offload's
        limit is host memory, unknown in a what-if)."""
        return max((self.largest(layout) for layout in layouts if not layout.offload), default=0)

    def gpus_needed(self) -> int | None:
        """The fewest GPUs of this kind that hold the model sharded (FSDP2), with its
        activations as given; None when even `MAX_GPUS` would not. FSDP2 is PyTorch's:
        a TensorFlow request gets the count of accelkit's PyTorch plan for the same
        model (its bytes per parameter, foreach step temporaries included), so the two
        plans name one count."""
        if self.request.framework is not Framework.TORCH:
            torch = dataclasses.replace(
                self.request, framework=Framework.TORCH, distribute=Distribution.AUTO
            )
            return _Model(self.hardware, torch, self.precision, self.gpus).gpus_needed()
        if self.usable is None:
            return None
        if self.footprint(Layout()).total <= self.usable:
            return 1
        if self.footprint(Layout(MAX_GPUS)).total > self.usable:
            return None
        lo, hi = 1, MAX_GPUS  # lo does not fit, hi does
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if self.footprint(Layout(mid)).total <= self.usable else (mid, hi)
        return hi

    def estimate(self, chosen: Layout | None, layouts: list[Layout]) -> MemoryEstimate:
        shown = chosen or layouts[0]
        held = self.footprint(shown)
        return MemoryEstimate(
            params=self.params,
            trainable_params=self.trainable,
            optimizer=self.request.optimizer.value,
            precision=self.precision.value,
            bytes_per_param=self.sizes.state,
            state_bytes=self.state,
            gpus=self.gpus,
            state_per_gpu_bytes=held.state,
            transient_bytes=held.transient,
            activation_bytes=self.request.activation_bytes,
            activations="unknown" if self.request.activation_bytes is None else "measured",
            per_gpu_bytes=held.total,
            device_bytes=self.device,
            usable_bytes=self.usable,
            headroom=HEADROOM,
            host_bytes=self.state if shown.offload else 0,
            choice=REFUSED if chosen is None else self.choice_name(chosen),
            reason=_reason(self, chosen, layouts),
            gpus_needed=self.gpus_needed(),
            largest_params=self.largest_held(layouts),
        )

    def choice_name(self, layout: Layout) -> str:
        if layout.sharded:
            return layout.name
        plain = "ddp" if self.gpus > 1 and self.request.framework is Framework.TORCH else "none"
        return layout.name.replace("replicated", plain)


def _these(gpus: int, can: bool = True) -> str:
    if gpus == 1:
        return "this GPU can" if can else "this one GPU"
    return f"these {gpus} GPUs"


def _params(value: int) -> str:
    return f"{value / 1e9:,.1f}B" if value >= 1e8 else f"{value / 1e6:,.1f}M"


def _state_line(model: _Model) -> str:
    sizes = model.sizes
    frozen = model.params - model.trainable
    dtype = model.request.frozen_dtype.value
    of_frozen = f" + {_params(frozen)} frozen x {sizes.frozen:.3g} B ({dtype})" if frozen else ""
    return (
        f"{_params(model.trainable)} trainable params x {sizes.state:g} B "
        f"({sizes.weights:g} weights + {sizes.gradients:g} gradients + {sizes.optimizer:g} "
        f"{model.request.optimizer.value} state){of_frozen} = {gigabytes(model.state)} of state"
    )


def _activations_line(model: _Model, layout: Layout) -> str:
    if model.request.activation_bytes is None:
        return f"activations unknown (measured at the first step){_left(model, layout)}"
    held = model.footprint(layout).activations
    if layout.checkpointing:
        given = gigabytes(model.request.activation_bytes)
        return f"activations {given} -> {gigabytes(held)} checkpointed"
    return f"activations {gigabytes(held)}"


def _left(model: _Model, layout: Layout) -> str:
    """What `layout` leaves the unknown activations, against the share kept for them."""
    if model.usable is None:
        return ""
    left = model.usable - model.footprint(layout).total
    kept = f"{gigabytes(model.reserve)}, {ACTIVATION_SHARE:.0%} of usable,"
    if left >= model.reserve:
        return f", {gigabytes(left)} left for them (at least {kept} kept for them)"
    return (
        f", only {gigabytes(left)} left for them, less than the {kept} kept when they are "
        "unknown: the first step may run out of memory; measure them (activation_bytes) "
        "before relying on this layout"
    )


def _per_gpu_line(model: _Model, layout: Layout) -> str:
    held = model.footprint(layout)
    device = (
        f"{gigabytes(model.usable)} usable of {model.gpu_name}'s {gigabytes(model.device)}"
        if model.usable is not None and model.device is not None
        else f"{model.gpu_name}: device memory unknown"
    )
    return (
        f"per GPU {gigabytes(held.state)} state + {gigabytes(held.transient)} transient, "
        f"{_activations_line(model, layout)}: {gigabytes(held.total)} of {device}"
    )


def _reason(model: _Model, chosen: Layout | None, layouts: list[Layout]) -> str:
    """Why `chosen` (None: the refusal), with the numbers."""
    state = _state_line(model)
    if model.usable is None:
        return f"{state}; {_per_gpu_line(model, layouts[0])}: nothing to compare with"
    whole = model.footprint(Layout())
    if chosen is None:
        return f"{state}; {_refusal(model, whole)}"
    fits = f"{_per_gpu_line(model, chosen)}, {HEADROOM:.0%} headroom kept"
    if not chosen.sharded:
        copies = f" (each of the {model.gpus} GPUs holds a whole replica)" if model.gpus > 1 else ""
        return f"{state}; {fits}{copies}"
    why = _why_not_whole(model, whole)
    if chosen.offload:
        host = (
            f"host memory {gigabytes(model.host)}"
            if model.host is not None
            else "host memory unknown"
        )
        return (
            f"{state}; {why}sharded over {_these(model.gpus, can=False)} it does not fit "
            "either: "
            f"CPU offload (FSDP2 CPUOffloadPolicy, the last resort: state and optimizer "
            f"step in host memory, {gigabytes(model.state)} needed, {host}, slower by the PCIe "
            f"traffic){_without_offload(model)}; {fits}"
        )
    also = ", activations checkpointed too" if chosen.checkpointing else ""
    return (
        f"{state}; {why}sharded over {model.gpus} GPUs (FSDP2 fully_shard, bf16 params, "
        f"float32 gradient reduction){also}: {fits}"
    )


def _why_not_whole(model: _Model, whole: Footprint) -> str:
    """Why a whole replica per GPU was not chosen: it does not fit, or it leaves the
    unknown activations less than the share kept for them."""
    usable = gigabytes(model.usable or 0)
    needs = f"a whole replica needs {gigabytes(whole.total)} per GPU"
    if model.usable is None or whole.total > model.usable:
        return f"{needs}, more than {usable} usable; "
    left = gigabytes(model.usable - whole.total)
    return (
        f"{needs} of {usable} usable, which leaves the unknown activations {left}, less "
        f"than the {gigabytes(model.reserve)} ({ACTIVATION_SHARE:.0%} of usable) kept for "
        "them; "
    )


def _without_offload(model: _Model) -> str:
    needed = model.gpus_needed()
    return f"; without offload FSDP2 needs {needed} of these GPUs" if needed else ""


def _refusal(model: _Model, whole: Footprint) -> str:
    """The numbers of a model that fits no planned layout here."""
    sharded = (
        f", sharded over {model.gpus}: {gigabytes(model.footprint(Layout(model.gpus)).total)}"
        if model.gpus > 1 and model.request.framework is Framework.TORCH
        else ""
    )
    largest = model.largest_held(_candidates(model.request, model.gpus))
    needed = model.gpus_needed()
    if model.request.framework is Framework.TENSORFLOW:
        more = (
            "TensorFlow's strategies (Mirrored, MultiWorkerMirrored) replicate the whole "
            "state on each GPU and accelkit plans no sharding for them"
            + (f"; PyTorch FSDP2 would hold it on {needed} of these GPUs" if needed else "")
        )
    else:
        more = (
            f"FSDP2 needs {needed} of these GPUs (sharded, without offload)"
            if needed
            else "no count of these GPUs holds it (the activations and one gathered "
            "block alone exceed a GPU): a smaller micro-batch or larger GPUs"
        )
    device = f"{gigabytes(model.usable or 0)} usable of {model.gpu_name}'s"
    return (
        f"does not fit: per GPU {gigabytes(whole.total)} as a whole replica{sharded}, "
        f"{device} {gigabytes(model.device or 0)}; "
        f"the largest model {_these(model.gpus)} hold: {_params(largest)} params; {more}"
    )


def _settings(
    estimate: MemoryEstimate, chosen: Layout | None, framework: Framework
) -> list[Setting]:
    if chosen is None:
        return [Setting(Key.MEMORY, REFUSED, estimate.reason)]
    value = "fsdp2" if chosen.sharded else estimate.choice.split("+")[0]
    out = [Setting(Key.SHARDING, value, estimate.reason)]
    if framework is Framework.TENSORFLOW:
        return out
    out.append(
        Setting(
            Key.ACTIVATION_CHECKPOINTING, chosen.checkpointing, _checkpoint_reason(estimate, chosen)
        )
    )
    if chosen.sharded:
        out.append(
            Setting(
                Key.CPU_OFFLOAD,
                chosen.offload,
                "the last resort: nothing else fits"
                if chosen.offload
                else "the shards fit on the GPUs: the state stays there",
            )
        )
    return out


def _checkpoint_reason(estimate: MemoryEstimate, chosen: Layout) -> str:
    if estimate.activation_bytes is None:
        return (
            "not planned: activations are unknown until the first step (give "
            "activation_bytes, or the fit measures them)"
        )
    given = gigabytes(estimate.activation_bytes)
    if chosen.checkpointing:
        return (
            f"activations of {given} do not fit beside the state: each block recomputed in "
            f"the backward pass keeps about 1/17 of its activations plus one block "
            f"(Korthikanti et al. 2022): {gigabytes(estimate.per_gpu_bytes)} per GPU; a smaller "
            "micro-batch with gradient accumulation is the other way, without recomputing"
        )
    return (
        f"activations of {given} fit beside the state: {gigabytes(estimate.per_gpu_bytes)} per GPU"
    )


def alone_sharded(plan: Plan, helper: str) -> str | None:
    """Why `helper` (a trainer's settings from the plan) leaves out the plan's sharding,
    or None: one GPU whose plan shards the model with FSDP2 (CPU offload where that is
    what fits) has no trainer setting for a process group of one, so the trainer would
    hold the whole replica. The numbers say how far it is from fitting, and the fix.

    Example:
        >>> import accelkit
        >>> why = alone_sharded(accelkit.plan_for("H100", params=8e9), "training_arguments")
        >>> why.split(" (")[0]
        'training_arguments(plan): the plan shards this model with FSDP2 and CPU offload on one GPU'

    """
    memory = plan.memory
    if (
        memory is None
        or memory.usable_bytes is None
        or plan.value(Key.SHARDING) != "fsdp2"
        or Distribution.parse(plan.distribution) is Distribution.FSDP
    ):
        return None
    offload = " and CPU offload" if plan.value(Key.CPU_OFFLOAD, False) else ""
    return (
        f"{helper}(plan): the plan shards this model with FSDP2{offload} on one GPU (its "
        f"weights, gradients and optimizer state need {gigabytes(memory.state_bytes)} where "
        f"{gigabytes(memory.usable_bytes)} is usable); these settings train the whole "
        "replica on the GPU and will run out of memory: train with accelkit.torch.fit "
        "(it shards in a process group of one), or launch under torchrun with the "
        "trainer's FSDP settings and CPU offload"
    )
