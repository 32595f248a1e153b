"""`tune` in a Hugging Face `Trainer`: the trials of `AccelkitCallback(tune=...)`.

The callback tells `accelkit.torch.tuning.in_trainer.TrainerTrials` where each optimizer
step begins and ends (``on_step_begin``, ``on_step_end``) and shows it the batch the
Trainer passes to ``model(**inputs)`` (a forward pre-hook). The compiled candidate
compiles the model's ``forward`` in place, around whatever the Trainer set there
(Accelerate's autocast); the check's forward and backward pass is that forward on the
batch, its loss read as the fit reads a model's (`in_trainer.scalar_of`). Each pass runs
on a copy of the model (`accelkit.torch.tuning.reference.copy_of`: its parameters and
buffers shared, the rest of its Python state copied for the length of the pass), so the
model's ``forward`` and the Trainer's ``compute_loss`` run only when the Trainer runs
them; the copy's forward is called directly, so the callbacks' batch readers (forward
hooks on the model) do not see it.

The Trainer's own settings come first: ``TrainingArguments(torch_compile=True)`` keeps
its compiled model (compile is not a candidate), and a sharded run (FSDP, DeepSpeed) is
not tuned.
"""

from __future__ import annotations

from typing import Any

from accelkit.profiling.tuning import TuneResult
from accelkit.torch.tuning import reference
from accelkit.torch.tuning.in_trainer import TrainerTrials, not_tuned, safely, scalar_of


def trials_for(
    args: Any, state: Any, model: Any, optimizer: Any, mode: Any, meter: Any
) -> TrainerTrials | TuneResult:
    """The trials of this `Trainer` run, or the record of why it is not tuned (never an
    error: a model without parameters, a Trainer that gave none)."""
    return safely(lambda: _trials_for(args, state, model, optimizer, mode, meter))


def _trials_for(
    args: Any, state: Any, model: Any, optimizer: Any, mode: Any, meter: Any
) -> TrainerTrials | TuneResult:
    if getattr(args, "fsdp", None) or getattr(args, "deepspeed", None):
        return not_tuned(
            "the Trainer shards the model (fsdp/deepspeed): tune measures "
            "single-device and DDP runs"
        )
    import torch

    device = next(model.parameters()).device
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
    return TrainerTrials(
        model,
        _torch_optimizer(torch, optimizer),
        device,
        mode=mode,
        compile_targets=[model],
        compile_fixed=_compiled_already(args, model),
        planned_steps=int(state.max_steps) if getattr(state, "max_steps", 0) else None,
        batches_per_unit=1,  # a unit is the Trainer's optimizer step, all its micro-batches
        forward_backward=_forward_backward(model),
        decide=_broadcast(device) if distributed else (lambda value: value),
        on_step=meter.hold_warmup,
    )


def _torch_optimizer(torch: Any, optimizer: Any) -> Any:
    """The torch optimizer inside Accelerate's wrapper, or None."""
    inner = getattr(optimizer, "optimizer", optimizer)
    return inner if isinstance(inner, torch.optim.Optimizer) else None


def _compiled_already(args: Any, model: Any) -> str | None:
    if getattr(args, "torch_compile", False):
        return "TrainingArguments(torch_compile=True): the Trainer compiles the model"
    if hasattr(vars(model).get("forward"), "_torchdynamo_orig_callable"):
        return "the script compiled the model's forward (torch.compile)"
    return None


def _forward_backward(model: Any) -> Any:
    def forward_backward(batch: Any) -> Any:
        loss = scalar_of(reference.copy_of(model).forward(**batch))
        loss.backward()
        return loss

    return forward_backward


def _broadcast(device: Any) -> Any:
    from accelkit.torch.distributed import parallel

    return lambda value: parallel.broadcast(value, device)
