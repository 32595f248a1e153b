"""`tune` in a Lightning fit: the trials of `AccelkitCallback(tune=...)`.

The callback tells `accelkit.torch.tuning.in_trainer.TrainerTrials` where each training
batch begins and ends; this module builds them for the fit. The compiled candidate is the
module's own ``training_step``, forward and loss together, its ``self.log`` calls made
after the compiled code (`accelkit.lightning._compiled_step`); where that fails, the
LightningModule's children that hold parameters (a ``training_step`` that calls
``self(x)`` or ``self.model(x)`` reaches them either way; the loss stays eager). A
``training_step(dataloader_iter)`` draws its own batches: only its children are
compiled. The check's forward and backward pass is the module's ``training_step`` (the
compiled one while that candidate is on) under the Trainer's precision, on the batch and
batch index the Trainer is about to train, its ``self.log`` calls silenced. Each pass runs
on a copy of the module (`accelkit.torch.tuning.reference.copy_of`; the Trainer it refers
to is the fit's own): a step that advances the module's Python state (a counter that
anneals a loss weight, a list of the losses seen) advances it once per trained batch, as
without tune. The copy shares the module's parameters and buffers; it costs the rest of
its Python state, for the length of a pass.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Mapping
from typing import Any

import torch

from accelkit.lightning._compiled_step import CompiledStep
from accelkit.profiling.tuning import TuneResult
from accelkit.torch.tuning import reference
from accelkit.torch.tuning.compiling import always
from accelkit.torch.tuning.in_trainer import TrainerTrials, never, not_tuned, safely

# The strategies whose module trains whole on each device, as tune measures it.
_TUNED_STRATEGIES = ("SingleDeviceStrategy", "DDPStrategy")


def trials_for(trainer: Any, pl_module: Any, mode: Any, meter: Any) -> TrainerTrials | TuneResult:
    """The trials of this fit, or the record of why it is not tuned (never an error)."""
    return safely(lambda: _trials_for(trainer, pl_module, mode, meter))


def _trials_for(trainer: Any, pl_module: Any, mode: Any, meter: Any) -> TrainerTrials | TuneResult:
    why = _not_tunable(trainer, pl_module)
    if why is not None:
        return not_tuned(why)
    optimizers = list(getattr(trainer, "optimizers", None) or ())
    accumulate = int(getattr(trainer, "accumulate_grad_batches", 1) or 1)
    return TrainerTrials(
        pl_module,
        optimizers[0] if len(optimizers) == 1 else None,
        pl_module.device,
        mode=mode,
        compile_targets=_with_parameters(pl_module),
        compile_fixed=_compiled_by_script(pl_module),
        compile_step=_step_compiler(pl_module),
        planned_steps=_planned_batches(trainer, accumulate),
        batches_per_unit=accumulate,
        forward_backward=_forward_backward(trainer, pl_module),
        decide=(lambda value: trainer.strategy.broadcast(value, src=0))
        if trainer.world_size > 1
        else (lambda value: value),
        on_step=meter.hold_warmup,
    )


def _not_tunable(trainer: Any, pl_module: Any) -> str | None:
    if not getattr(pl_module, "automatic_optimization", True):
        return "the LightningModule steps its own optimizers (automatic_optimization=False)"
    strategy = type(trainer.strategy).__name__
    if strategy not in _TUNED_STRATEGIES:
        return f"the {strategy}: tune measures single-device and DDP fits"
    return None


def _with_parameters(pl_module: Any) -> list[Any]:
    return [child for child in pl_module.children() if any(True for _ in child.parameters())]


def _step_compiler(pl_module: Any) -> Any:
    """What compiles the module's ``training_step`` when tried, or None: one that takes
    the loader's iterator draws batches itself, outside what one compiled call can hold."""
    if "dataloader_iter" in inspect.signature(pl_module.training_step).parameters:
        return None
    return lambda mode=None, rescue=never, strict=always: CompiledStep(
        torch, pl_module, rescue, strict, mode=mode
    )


def _compiled_by_script(pl_module: Any) -> str | None:
    """Why compile is the script's already, or None."""
    if getattr(pl_module, "_compiler_ctx", None):  # Lightning's record of torch.compile(module)
        return "the script compiled the LightningModule (torch.compile)"
    if hasattr(vars(pl_module).get("training_step"), "_torchdynamo_orig_callable"):
        return "the script compiled training_step (torch.compile)"
    for name, module in pl_module.named_modules():
        forward = vars(module).get("forward")
        if type(module).__name__ == "OptimizedModule" or hasattr(
            forward, "_torchdynamo_orig_callable"
        ):
            return f"the script compiled {name or 'the module'} (torch.compile)"
    return None


def _planned_batches(trainer: Any, accumulate: int) -> int | None:
    try:
        steps = float(trainer.estimated_stepping_batches)
    except Exception:  # noqa: BLE001 - a loader without a length: the length is unknown
        return None
    return int(steps * accumulate) if steps != float("inf") else None


def _forward_backward(trainer: Any, pl_module: Any, *, uncompiled: bool = False) -> Any:
    """``forward_backward((batch, batch_idx)) -> loss`` on a copy of `pl_module` made for
    the pass (`TrainerTrials`' check); `uncompiled`: the class's ``training_step``, not a
    compiled one the module holds (a FLOP count cannot see inside compiled graphs)."""
    plugin = getattr(trainer, "precision_plugin", None)
    context = getattr(plugin, "train_step_context", contextlib.nullcontext)

    def forward_backward(batch_and_index: tuple[Any, int]) -> Any:
        batch, index = batch_and_index
        module = step_copy(pl_module)
        step = type(module).training_step.__get__(module) if uncompiled else module.training_step
        with context():
            output = step(batch, index)
        loss = output["loss"] if isinstance(output, Mapping) else output
        loss.backward()
        return loss

    return forward_backward


def step_counter(trainer: Any, pl_module: Any) -> Any:
    """``count(batch) -> FlopCount``: one training step of `pl_module` on `batch`
    (`_forward_backward`, uncompiled), counted with the module's gradients, buffers and
    random number generators put back (`accelkit.torch.measuring.meter.Meter.count_again`
    after a kept float8 step)."""
    from accelkit.profiling.flops_torch import counted, flop_counter

    forward_backward = _forward_backward(trainer, pl_module, uncompiled=True)

    def count(batch: Any) -> Any:
        params = [p for p in pl_module.parameters() if p.requires_grad]
        device = params[0].device if params else torch.device("cpu")
        with reference.kept(pl_module, params, device, torch), flop_counter() as counter:
            forward_backward((batch, 0))
        return counted(counter, method=_COUNTED)

    return count


_COUNTED = "torch FlopCounterMode over a copy's training_step and backward (after tune)"


def step_copy(pl_module: Any) -> Any:
    """`pl_module` copied for one pass of the check (`reference.copy_of`): attached to
    the fit's Trainer (a LightningModule leaves it out of its copies), its ``self.log``
    calls doing nothing (the pass is not a step of the fit).

    Example:
        >>> import torch
        >>> class Module(torch.nn.Linear):   # a LightningModule's training_step and log
        ...     seen = ()
        ...     def log(self, name, value):
        ...         raise AssertionError("logged")
        ...     def training_step(self, batch, batch_idx):
        ...         loss = self(batch).square().mean()
        ...         self.seen += (float(loss.detach()),)
        ...         self.log("loss", loss)
        ...         return loss
        >>> module = Module(4, 2)
        >>> _ = step_copy(module).training_step(torch.ones(3, 4), 0)
        >>> module.seen
        ()
    """
    module = reference.copy_of(pl_module)
    if "_trainer" in vars(pl_module):
        module._trainer = pl_module._trainer
    module.log = module.log_dict = _ignore
    return module


def _ignore(*args: Any, **kwargs: Any) -> None:
    return None
