"""The activations measured on the first training step, and the memory estimate of the
model at hand (`accelkit.planning.memory`) beside the peak the run measures.

A plan made before the model exists knows its size only when told (``params=``); every
door of accelkit has the model and runs its first step, so it counts the parameters,
names the optimizer, and measures the activations there: the CUDA caching allocator's
peak during the first forward and backward pass beyond what was allocated before it,
read by a post-accumulate-grad hook on each trainable parameter (the last gradient
written ends the backward pass, before any optimizer step; hooks and the optimizer's
own pre-step hooks differ there, since Lightning steps with a closure that runs the
forward pass inside ``optimizer.step``). The hooks live for that step only; reading the
allocator's counters is host-side (no device synchronisation). The planner's memory
model then gives what one GPU should hold under the run's layout
(``facts["predicted_memory_bytes"]``) and the layout it would choose for this model
here (``facts["memory_choice"]``). The method is the one benchmarks/memory_model.py
checked on an H200: GPT-2 small to XL, predicted within 1.6% of the measured peak.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

from accelkit.planning import sharding
from accelkit.planning.memory import Layout, activations_from_rise, footprint, per_param
from accelkit.planning.types import Framework, FrozenDtype, Optimizer, Plan, Request

# Optimizer classes by name (torch.optim, bitsandbytes, transformers) and the state the
# memory model counts for them; SGD's momentum is read from its parameter groups.
_OPTIMIZERS = {
    "AdamW": Optimizer.ADAMW,
    "Adam": Optimizer.ADAM,
    "AdamW8bit": Optimizer.ADAMW_8BIT,
    "PagedAdamW8bit": Optimizer.ADAMW_8BIT,
    "Adam8bit": Optimizer.ADAMW_8BIT,
    "Adafactor": Optimizer.ADAFACTOR,
}


def optimizer_kind(optimizer: Any) -> Optimizer | None:
    """The memory model's name for `optimizer` (Accelerate's and Lightning's wrappers
    looked through), or None for one it does not know.

    Example:
        >>> import torch
        >>> w = torch.nn.Parameter(torch.zeros(2))
        >>> optimizer_kind(torch.optim.SGD([w], lr=0.1, momentum=0.9)).value
        'sgd_momentum'
    """
    optimizer = unwrapped(optimizer)
    name = type(optimizer).__name__
    if name == "SGD":
        groups = getattr(optimizer, "param_groups", None) or [{}]
        momentum = any(group.get("momentum", 0) for group in groups)
        return Optimizer.SGD_MOMENTUM if momentum else Optimizer.SGD
    return _OPTIMIZERS.get(name)


def unwrapped(optimizer: Any) -> Any:
    """The optimizer inside Accelerate's ``AcceleratedOptimizer`` (``.optimizer``) and
    Lightning's ``LightningOptimizer`` (``._optimizer``)."""
    for _ in range(4):
        inner = getattr(optimizer, "optimizer", None) or getattr(optimizer, "_optimizer", None)
        if inner is None or inner is optimizer:
            break
        optimizer = inner
    return optimizer


def _local_bytes(tensor: Any) -> int:
    """Bytes of this rank's part of `tensor` (a DTensor's local shard)."""
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return int(local.numel() * local.element_size())


class ActivationProbe:
    """The first step's rise of device memory and the gradients it made (CUDA only).

    ``begin()`` before the step's forward pass, ``end()`` after it (both no-ops after
    the first step and off CUDA); `rise` and `gradient_bytes` are then set, or `why`
    says why not. `prior_peak` is the allocator's peak before the step, which the
    measurement resets: the run's peak is the larger of it and the peak after.
    """

    def __init__(self, torch: Any, device: Any, model: Any) -> None:
        self._torch, self._device, self._model = torch, device, model
        self._armed = device.type == "cuda" and model is not None
        self.why: str | None = None
        if model is None:
            self.why = "no model given to the meter"
        elif device.type != "cuda":
            self.why = "measured on CUDA devices (the caching allocator's peak)"
        self.prior_peak = 0
        self.rise: int | None = None
        self.gradient_bytes: int | None = None
        self._before = self._grads_before = 0
        self._peak: int | None = None
        self._grads: dict[int, int] = {}
        self._hooks: list[Any] = []

    def begin(self) -> None:
        if not self._armed:
            return
        self._armed = False
        try:
            cuda = self._torch.cuda
            trainable = [p for p in self._model.parameters() if p.requires_grad]
            self._grads = {id(p): _local_bytes(p.grad) for p in trainable if p.grad is not None}
            self.prior_peak = int(cuda.max_memory_allocated(self._device))
            cuda.reset_peak_memory_stats(self._device)
            self._before = int(cuda.memory_allocated(self._device))
            self._grads_before = sum(self._grads.values())
            self._hooks = [p.register_post_accumulate_grad_hook(self._read) for p in trainable]
        except Exception as error:  # noqa: BLE001 - a figure for the report, never a failure
            self._stop(f"could not hook the parameters: {type(error).__name__}: {error}")

    def _read(self, param: Any) -> None:
        self._peak = int(self._torch.cuda.max_memory_allocated(self._device))
        if param.grad is not None:
            self._grads[id(param)] = _local_bytes(param.grad)

    def end(self) -> None:
        if not self._hooks:
            return
        if self._peak is None:
            self._stop("no gradient reached the parameters during the first step")
            return
        self.rise = self._peak - self._before
        self.gradient_bytes = max(0, sum(self._grads.values()) - self._grads_before)
        self._stop(None)

    def abandon(self) -> None:
        """Drop the hooks of a first step that did not end (it raised)."""
        if self._hooks:
            self._stop("the first step did not end (it raised)")

    def _stop(self, why: str | None) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks, self._grads = [], {}
        self.why = why


class TrialsPeak:
    """The allocator's peak during tune's trial steps, kept apart from the run's.

    A candidate holds memory of its own while it is tried (the CUDA graphs' pool, 37 GiB
    for a Llama-3.2-1B at 8 x 2048 on an H100, beside a compiled step of 46 GB), which the
    step the run keeps does not. The meter calls `trial_step` before each trial step and
    `step_begin` at every step: at the first step after the trials (the second in the
    trainers' callbacks, which begin the meter's step before the trial's), the peak so
    far becomes `bytes` and the allocator's counter is reset, so that the run's peak is
    the kept step's. Off CUDA, and without trials, it does nothing.

    Example:
        >>> import torch
        >>> peak = TrialsPeak(torch, torch.device("cpu"))
        >>> peak.trial_step(); peak.step_begin(); peak.step_begin()
        >>> peak.bytes is None
        True
    """

    def __init__(self, torch: Any, device: Any) -> None:
        self._torch, self._device = torch, device
        self._cuda = device.type == "cuda"
        self._trial = self._tried = False
        self.bytes: int | None = None

    def trial_step(self) -> None:
        """The next step is a trial's."""
        self._trial = True

    def step_begin(self) -> None:
        if self._trial:
            self._trial, self._tried = False, True
        elif self._tried:
            self._tried = False
            self._take()

    def _take(self) -> None:
        if not self._cuda:
            return
        try:
            cuda = self._torch.cuda
            self.bytes = int(cuda.max_memory_allocated(self._device))
            cuda.reset_peak_memory_stats(self._device)
        except Exception:  # noqa: BLE001 - a figure for the report, never a failure
            self.bytes = None


def memory_facts(probe: ActivationProbe, model: Any, optimizer: Any, plan: Plan) -> dict[str, Any]:
    """What the memory model says of this model given the first step's measurement:
    ``activation_bytes``, ``predicted_memory_bytes`` (one GPU under the run's layout),
    ``memory_choice`` (the layout the planner chooses for it here) and how they were
    obtained (``memory_estimate``); {} when the first step was not measured."""
    if probe.rise is None or probe.gradient_bytes is None:
        return {}
    if optimizer is None:
        return {
            "memory_estimate": "not estimated: no optimizer was given (Meter(model, "
            "optimizer=...)), and its state is most of what a GPU holds beside the model"
        }
    kind = optimizer_kind(optimizer)
    if kind is None:
        return {
            "memory_estimate": f"not estimated: the memory model does not know "
            f"{type(optimizer).__name__} (known: {', '.join(o.value for o in Optimizer)})"
        }
    params = _parameters(model)
    size = _request(params, kind)
    count, trainable = size.params, size.trainable_params
    assert count is not None and trainable is not None  # model_request counts both
    sizes = per_param(kind, plan.precision, Framework.TORCH, size.frozen_dtype)
    if _implementation(optimizer) != "foreach":  # fused and for-loop steps update in place
        sizes = dataclasses.replace(sizes, step=0)
    layout = _layout(params)
    rise, grads = probe.rise, probe.gradient_bytes
    activations = activations_from_rise(rise, grads, layout, sizes, count, trainable)
    held = footprint(layout, sizes, count, trainable, activations)
    facts: dict[str, Any] = {
        "activation_bytes": activations,
        "predicted_memory_bytes": held.total,
        "memory_estimate": (
            f"{count:,} parameters ({trainable:,} trainable), {kind.value}, activations "
            f"measured on the first step (the allocator's peak through its backward pass)"
        ),
    }
    if getattr(model, "is_gradient_checkpointing", False):
        facts["memory_estimate"] += "; the model recomputes its activations (checkpointing)"
        return facts  # the layouts compared would count the checkpointing twice
    request = dataclasses.replace(size, activation_bytes=activations)
    estimate, _ = sharding.choose(plan.hardware, request, plan.precision)
    if estimate is not None:
        facts["memory_choice"] = estimate.choice
    return facts


def model_request(model: Any, optimizer: Optimizer) -> Request:
    """The planner's request for `model` trained by an optimizer of the kind `optimizer`
    (`optimizer_kind`): its parameters (each counted once, tied weights too), those that
    require gradients, and the dtype its frozen ones are held in (`frozen_dtype`);
    activations unknown.

    Raises:
        ValueError: the model has no parameter, or none that requires gradients
            (`Request` takes whole counts from 1).

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
        >>> model[0].requires_grad_(False)
        Linear(in_features=8, out_features=8, bias=True)
        >>> size = model_request(model, Optimizer.ADAMW)
        >>> size.params, size.trainable_params, size.frozen_dtype.value
        (90, 18, 'fp32')
    """
    return _request(_parameters(model), optimizer)


def _request(params: list[Any], optimizer: Optimizer) -> Request:
    """`model_request` of a model's parameters, each once (`_parameters`)."""
    return Request(
        framework=Framework.TORCH,
        params=sum(_count(p) for p in params),
        trainable_params=sum(_count(p) for p in params if p.requires_grad),
        optimizer=optimizer,
        frozen_dtype=frozen_dtype(params),
    )


def _parameters(model: Any) -> list[Any]:
    """`model`'s parameters, each once (a weight tied to two modules is one)."""
    return list({id(p): p for p in model.parameters()}.values())


# Frozen weights' dtypes the memory model knows, by torch dtype; bitsandbytes holds its
# 8-bit weights as int8 (Int8Params) and packs its 4-bit ones two to a byte (Params4bit).
_FROZEN = {
    "torch.float32": FrozenDtype.FP32,
    "torch.bfloat16": FrozenDtype.BF16,
    "torch.float16": FrozenDtype.FP16,
    "torch.int8": FrozenDtype.INT8,
}


def frozen_dtype(params: list[Any]) -> FrozenDtype:
    """The dtype most of the frozen parameters (``requires_grad=False``) are held in,
    counted by parameters; fp32 when none is frozen or their dtype is not one of
    `FrozenDtype` (float32, the planner's default, counts the most).

    Example:
        >>> import torch
        >>> base, adapter = torch.nn.Linear(8, 8).bfloat16(), torch.nn.Linear(8, 2)
        >>> base.requires_grad_(False)
        Linear(in_features=8, out_features=8, bias=True)
        >>> frozen_dtype([*base.parameters(), *adapter.parameters()]).value
        'bf16'
    """
    held: collections.Counter[FrozenDtype] = collections.Counter()
    for param in params:
        if not param.requires_grad:
            four_bit = type(param).__name__ == "Params4bit"
            kind = FrozenDtype.INT4 if four_bit else _FROZEN.get(str(param.dtype))
            held[kind or FrozenDtype.FP32] += _count(param)
    return held.most_common(1)[0][0] if held else FrozenDtype.FP32


def _count(param: Any) -> int:
    """Parameters `param` holds: bitsandbytes' 4-bit weights pack two to an element."""
    return param.numel() * (2 if type(param).__name__ == "Params4bit" else 1)


def _layout(params: list[Any]) -> Layout:
    """The run's layout: FSDP2 over its mesh when the parameters are DTensors."""
    for param in params:
        mesh = getattr(param, "device_mesh", None)
        if mesh is not None:
            local = param.to_local()
            return Layout(shards=mesh.size(), offload=local.device.type == "cpu")
    return Layout()


def _implementation(optimizer: Any) -> str | None:
    from accelkit.torch.measuring.facts import optimizer_facts

    return optimizer_facts(unwrapped(optimizer)).get("implementation")
