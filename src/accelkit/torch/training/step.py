"""The second part of `accelkit.torch.fit`: one training step as the plan sets it up.

Autocast in the plan's 16-bit dtype with the loss inside it, compiled together
with the forward pass when asked; the gradient scaler; the optimizer step. The
parts are closures over what they use, so the loop calls them without looking
anything up.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from accelkit.frameworks import torch_precision
from accelkit.planning import Plan
from accelkit.profiling import torch_batches
from accelkit.profiling.flop_count import FlopCount
from accelkit.profiling.flops_torch import count_train_step_flops
from accelkit.torch.distributed import sharding
from accelkit.torch.training.prepare import Prepared
from accelkit.torch.training.scheduling import Scheduling
from accelkit.utils.imports import require


@dataclasses.dataclass(frozen=True)
class Step:
    """The parts of one training step.

    Attributes:
        forward_loss: ``forward_loss(batch) -> loss``: the forward pass and the loss
            under autocast, compiled together when `compiled`; always a 0-d tensor
            (`accelkit.profiling.torch_batches.forward_loss` reads it from the batch
            and the output, or raises a `ValueError` saying what it got).
        optimizer_step: ``optimizer_step()``: unscale and clip the gradients when a
            norm is given, step through the scaler, zero the gradients.
        scaler: the `torch.amp.GradScaler`; it scales only for fp16 on CUDA and
            passes calls through elsewhere.
        count_flops: ``count_flops(batch) -> FlopCount``: one step counted on the
            uncompiled module.
        compiled: whether `forward_loss` went through ``torch.compile``.
        model: what `forward_loss` calls: the `DistributedDataParallel` wrapper under a
            process group (the loop's ``no_sync()`` must be this one's), else the module.
        ddp: the DDP options this step trains under (`accelkit.torch.tuning.levers`), for
            tune's records and the report; empty without DDP.
        through: ``through(model, compiled) -> Step``: the same step (optimizer step,
            scaler) through another model, e.g. the module re-wrapped with other DDP
            options; `forward_loss` is built (and compiled) again for it.
        notes: how the loss was read where that is not plain (``"loss"``: a sum of the
            model's losses), filled by `forward_loss` as it trains, for the report.
        scheduling: the loop's LR scheduler: `optimizer_step` steps it where it steps
            after each optimizer step, the loop after each epoch where it steps then.
    """

    forward_loss: Callable[[Any], Any]
    optimizer_step: Callable[[], None]
    scaler: Any
    count_flops: Callable[[Any], FlopCount]
    compiled: bool
    model: Any = None
    ddp: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    through: Callable[[Any, bool], Step] | None = None
    notes: dict[str, str] = dataclasses.field(default_factory=dict)
    scheduling: Scheduling = dataclasses.field(default_factory=Scheduling)


# train_one(batch, step) -> the step's loss tensor: what the loop does with one batch,
# and what it hands the tuner to train the trials with. ``train_one(batch, step,
# again=True)``: the forward and backward pass of a batch already counted (a failed
# trial's unit trained again), neither counted nor measured a second time.
TrainOne = Callable[..., Any]


def make_step(
    run: Prepared,
    plan: Plan,
    loss_fn: Callable[..., Any] | None,
    optimizer: Any,
    *,
    compile: bool | None,
    max_grad_norm: float | None,
    scheduling: Scheduling | None = None,
) -> Step:
    """The step for `run` in `plan`'s precision.

    Args:
        run: the prepared model (the step calls ``run.model``; FLOPs are counted on
            ``run.module``).
        plan: the plan in force (its 16-bit dtype, loss scaling, compile choice).
        loss_fn: ``loss_fn(output, targets)``, `output` exactly as the model returned
            it (a tensor, a transformers `ModelOutput`...); targets are a tuple batch's
            second item or a dict batch's ``"labels"``. None: the model is called on the
            whole batch and returns the loss (a 0-d tensor, ``.loss``, ``["loss"]``, or
            a tuple's 0-d tensor). The convention: `accelkit.profiling.torch_batches`.
        optimizer: the optimizer the step drives.
        compile: ``torch.compile`` forward and loss together; None: the plan's choice.
        max_grad_norm: clip gradients to this norm before each optimizer step.
        scheduling: the LR scheduler to step (`accelkit.torch.training.scheduling`; None:
            none).

    Example:
        >>> import accelkit
        >>> import torch
        >>> from accelkit.torch.training.prepare import prepare
        >>> model, batch = torch.nn.Linear(4, 2), (torch.randn(8, 4), torch.zeros(8).long())
        >>> plan = accelkit.plan_for(None)
        >>> run = prepare(model, [batch], plan, device="cpu", channels_last=None, group=None)
        >>> optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        >>> step = make_step(run, plan, torch.nn.CrossEntropyLoss(), optimizer, compile=None,
        ...                  max_grad_norm=None)
        >>> step.forward_loss(batch).dim()
        0
    """
    torch = require("torch")
    device_type = run.device.type
    # Loss scaling exists for fp16 on CUDA; elsewhere the scaler passes calls through.
    scaler = (
        torch_precision.grad_scaler(plan, device_type)
        if device_type == "cuda"
        else torch.amp.GradScaler(device_type, enabled=False)
    )
    if run.sharded is not None:  # FSDP2: every rank must agree on a step's inf/NaN
        scaler = sharding.grad_scaler(scaler)
    # Compiling forward and loss together lets the compiler fuse the loss into the
    # output layer's epilogue.
    compiled = plan.compile if compile is None else compile
    autocast = functools.partial(torch_precision.autocast, plan, device_type)
    dtype = torch_precision.autocast_dtype(plan)
    scheduling = scheduling or Scheduling()
    optimizer_step = _optimizer_step(
        torch, run.model, optimizer, scaler, max_grad_norm, scheduling.after_optimizer_step
    )
    count_flops = functools.partial(_count, run.module, loss_fn, autocast)
    notes: dict[str, str] = {}

    def through(model: Any, compiled: bool) -> Step:
        forward_loss = _forward_loss(torch, model, loss_fn, device_type, dtype, notes)
        return Step(
            forward_loss=torch.compile(forward_loss) if compiled else forward_loss,
            optimizer_step=optimizer_step,
            scaler=scaler,
            count_flops=count_flops,
            compiled=compiled,
            model=model,
            through=through,
            notes=notes,
            scheduling=scheduling,
        )

    step = through(run.model, compiled)
    return dataclasses.replace(step, ddp=run.wrapping.settings()) if run.wrapping else step


def _forward_loss(
    torch: Any,
    model: Any,
    loss_fn: Callable[..., Any] | None,
    device_type: str,
    dtype: Any,
    notes: dict[str, str],
) -> Callable[[Any], Any]:
    enabled = dtype is not None

    def forward_loss(batch: Any) -> Any:
        # The loss runs under autocast, where PyTorch computes softmax, log-softmax and
        # the losses in float32 from 16-bit outputs inside the kernel: the float32 head
        # without a separate cast pass (an explicit .float() of GPT-2's logits costs 8%
        # of the step on an H200). torch.autocast itself, so torch.compile traces it.
        with torch.autocast(device_type, dtype=dtype, enabled=enabled):
            return torch_batches.forward_loss(model, batch, loss_fn, notes)

    return forward_loss


def check_optimizer(optimizer: Any) -> Any:
    """`optimizer` itself, or ValueError when the fit cannot step it: no ``step()`` and
    ``zero_grad()``, or a ``step(closure)`` that needs a closure (L-BFGS re-evaluates
    the loss itself; the fit calls ``optimizer.step()`` without one).

    Example:
        >>> import torch
        >>> lbfgs = torch.optim.LBFGS([torch.zeros(1, requires_grad=True)])
        >>> check_optimizer(lbfgs)  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        ValueError: optimizer LBFGS needs a closure (step(closure)), which the fit ...
    """
    kind = type(optimizer).__name__
    if not (callable(getattr(optimizer, "step", None)) and hasattr(optimizer, "zero_grad")):
        raise ValueError(
            f"optimizer must be a torch.optim.Optimizer (with step() and zero_grad()); got {kind}"
        )
    try:
        closure = inspect.signature(optimizer.step).parameters.get("closure")
    except (TypeError, ValueError):  # a builtin or C-extension step: no signature to read
        return optimizer
    if closure is not None and closure.default is inspect.Parameter.empty:
        raise ValueError(
            f"optimizer {kind} needs a closure (step(closure)), which the fit does not "
            "give: it steps with optimizer.step() once per accumulation; train it in a "
            "hand-written loop (accelkit.torch.Meter measures one), or use an optimizer "
            "whose closure is optional (SGD, Adam, AdamW...)"
        )
    return optimizer


def _optimizer_step(
    torch: Any,
    model: Any,
    optimizer: Any,
    scaler: Any,
    max_grad_norm: float | None,
    after: Callable[[], None],
) -> Callable[[], None]:
    clip = torch.nn.utils.clip_grad_norm_

    def optimizer_step() -> None:
        if max_grad_norm is not None:
            scaler.unscale_(optimizer)
            clip(model.parameters(), max_grad_norm)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        after()  # the LR scheduler, where the loop steps it after each optimizer step

    return optimizer_step


def _count(module: Any, loss_fn: Any, autocast: Any, batch: Any) -> FlopCount:
    """FLOPs of one step on the uncompiled module (FlopCounterMode cannot see inside
    compiled graphs); the module's state is restored afterwards."""
    if loss_fn is None:
        return count_train_step_flops(module, batch, None, None, autocast=autocast)
    inputs, targets = torch_batches.split(batch)  # a batch without targets: ValueError
    return count_train_step_flops(module, inputs, targets, loss_fn, autocast=autocast)
