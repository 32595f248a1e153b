"""CUDA graphs for launch-bound steps: ``torch.compile(mode="reduce-overhead")``, a `tune`
candidate of the fit and of the trainer callbacks (`accelkit.torch.tuning.in_trainer`).

A step of short kernels spends its time launching them, one by one from Python: on an
H200, ResNet-50 at batch 64 gained nothing from ``torch.compile`` alone (0.99x the eager
step, docs/benchmarks.md). ``torch.compile``'s CUDA graphs (its "cudagraph trees") record
the compiled forward and backward graphs once and then replay each with one launch.

What changes for the loop, and how `step` keeps it as it was:

- a graph's outputs live in its memory pool and are overwritten by the next replay:
  they are copied out of it (`copied_out`: the fit's 0-d loss, a trainer's training
  step's output and logged values, a model's output), and the backward pass runs
  through the copies, so what the loop keeps stays what it was;
- each forward pass begins a new replay (``torch.compiler.cudagraph_mark_step_begin``).

The candidate is checked against the eager step like the compiled one
(`accelkit.torch.tuning.reference`), and a replay that fails (a dynamic shape, memory)
drops it with its reason (`accelkit.torch.tuning.trial_guards`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from accelkit.profiling.tuning import Trial
from accelkit.torch.training.step import Step


def unsupported(torch: Any, device: Any, *, ddp: bool, compiled: Trial | None) -> str | None:
    """Why CUDA graphs are not tried on `device` after `compiled`, the trial of the
    default compile whose code they would capture (None: compile was not tried), or
    None; `ddp`: the gradients are all-reduced by DDP."""
    if compiled is None:
        return "torch.compile was not tried"
    if compiled.status == "failed":
        return f"torch.compile failed ({compiled.why})"
    if device.type != "cuda":
        return "CUDA graphs need a CUDA device"
    if ddp:
        return "under DDP the gradients' all-reduce runs outside the graphs"
    if not hasattr(torch.compiler, "cudagraph_mark_step_begin"):
        return f"PyTorch {torch.__version__} has no torch.compiler.cudagraph_mark_step_begin"
    return None


def under_ddp(step: Step) -> bool:
    """Whether `step` trains a DDP-wrapped model (the fit's own wrapper or the script's)."""
    return bool(step.ddp) or type(step.model).__name__ == "DistributedDataParallel"


# torch.compile's modes that autotune the kernels (matmul configurations by benchmark),
# with and without CUDA graphs: `tune`'s max-autotune candidate.
AUTOTUNE = "max-autotune"
AUTOTUNE_NO_GRAPHS = "max-autotune-no-cudagraphs"
REDUCE_OVERHEAD = "reduce-overhead"
_CAPTURING = (REDUCE_OVERHEAD, AUTOTUNE)  # the modes that capture CUDA graphs


def captures(mode: str | None) -> bool:
    """Whether torch.compile's `mode` captures CUDA graphs.

    >>> captures("reduce-overhead"), captures("max-autotune-no-cudagraphs"), captures(None)
    (True, False, False)
    """
    return mode in _CAPTURING


def copied_out(torch: Any, value: Any) -> Any:
    """`value` with its tensors cloned: a CUDA graph's outputs live in its memory pool,
    which the next replay overwrites. Tuples, lists, dicts and what registers itself
    as a pytree (a transformers ``ModelOutput``) are followed; clones keep autograd's
    path to the graph's backward. Other objects pass as they are (a transformers cache
    among a model's outputs, which a trainer does not read in training).

    >>> import torch
    >>> loss = torch.ones(())
    >>> copied_out(torch, {"loss": loss})["loss"] is loss
    False
    """
    return torch.utils._pytree.tree_map_only(torch.Tensor, torch.Tensor.clone, value)


def replayed(torch: Any, compiled: Any) -> Any:
    """`compiled` (torch.compile'd in a mode that `captures`) safe for a loop that keeps
    what it returns: each call begins a new replay
    (``torch.compiler.cudagraph_mark_step_begin``) and returns its outputs `copied_out`."""
    mark_step_begin = torch.compiler.cudagraph_mark_step_begin

    def call(*args: Any, **kwargs: Any) -> Any:
        mark_step_begin()
        return copied_out(torch, compiled(*args, **kwargs))

    return call


def step(torch: Any, eager: Step, mode: str = REDUCE_OVERHEAD) -> Step:
    """`eager` with its forward pass and loss compiled into CUDA graphs (`mode`: one of
    torch.compile's modes that capture them, ``"reduce-overhead"`` or `AUTOTUNE`).

    Example:
        >>> import accelkit
        >>> import torch
        >>> from accelkit.torch.training.prepare import prepare
        >>> from accelkit.torch.training.step import make_step
        >>> model, plan = torch.nn.Linear(16, 4), accelkit.plan_for(None)
        >>> run = prepare(model, [], plan, device="cpu", channels_last=None, group=None)
        >>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
        >>> eager = make_step(run, plan, torch.nn.CrossEntropyLoss(), opt, compile=False,
        ...                   max_grad_norm=None)
        >>> step(torch, eager).compiled
        True
        >>> compiled = Trial("compile", {"compile": True}, status="chosen")
        >>> unsupported(torch, run.device, ddp=under_ddp(eager), compiled=compiled)
        'CUDA graphs need a CUDA device'
    """
    forward_loss = replayed(torch, torch.compile(eager.forward_loss, mode=mode))
    return dataclasses.replace(eager, forward_loss=forward_loss, compiled=True)
