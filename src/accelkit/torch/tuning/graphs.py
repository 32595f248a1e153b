"""CUDA graphs for launch-bound steps: ``torch.compile(mode="reduce-overhead")``, a `tune`
candidate of the fit.

A step of short kernels spends its time launching them, one by one from Python: on an
H200, ResNet-50 at batch 64 gained nothing from ``torch.compile`` alone (0.99x the eager
step, docs/benchmarks.md). ``torch.compile``'s CUDA graphs (its "cudagraph trees") record
the compiled forward and backward graphs once and then replay each with one launch.

What changes for the loop, and how `step` keeps it as it was:

- a graph's outputs live in its memory pool and are overwritten by the next replay: the
  loss is copied out of it (a 0-d clone, through which the backward pass runs), so a
  loss the loop keeps stays what it was;
- each forward pass begins a new replay (``torch.compiler.cudagraph_mark_step_begin``).

The candidate is checked against the eager step like the compiled one
(`accelkit.torch.tuning.reference`), and a replay that fails (a dynamic shape, memory)
drops it with its reason (`accelkit.torch.tuning.trial_guards`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from accelkit.torch.training.step import Step


def unsupported(torch: Any, step: Step, device: Any) -> str | None:
    """Why CUDA graphs are not tried for `step` on `device`, or None."""
    if device.type != "cuda":
        return "CUDA graphs need a CUDA device"
    if step.ddp or type(step.model).__name__ == "DistributedDataParallel":
        return "under DDP the gradients' all-reduce runs outside the graphs"
    if not hasattr(torch.compiler, "cudagraph_mark_step_begin"):
        return f"PyTorch {torch.__version__} has no torch.compiler.cudagraph_mark_step_begin"
    return None


# torch.compile's modes that autotune the kernels (matmul configurations by benchmark),
# with and without CUDA graphs: `tune`'s max-autotune candidate.
AUTOTUNE = "max-autotune"
AUTOTUNE_NO_GRAPHS = "max-autotune-no-cudagraphs"


def step(torch: Any, eager: Step, mode: str = "reduce-overhead") -> Step:
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
        >>> unsupported(torch, eager, run.device)
        'CUDA graphs need a CUDA device'
    """
    graphed = torch.compile(eager.forward_loss, mode=mode)
    mark_step_begin = torch.compiler.cudagraph_mark_step_begin

    def forward_loss(batch: Any) -> Any:
        mark_step_begin()
        return graphed(batch).clone()

    return dataclasses.replace(eager, forward_loss=forward_loss, compiled=True)
