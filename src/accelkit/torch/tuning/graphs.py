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
drops it with its reason (`accelkit.torch.tuning.trial_guards`). A candidate that is not
kept leaves its graphs' memory pool reserved, which nothing else may use (4.0 GB beside
the step's own 2.5 GB for GPT-2 small at batch 8 on the H200: benchmarks/graphs_pool.py);
`release` gives it back where the trials own every graph tree.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from accelkit.profiling.tuning import Trial
from accelkit.torch.training.step import Step

_log = logging.getLogger("accelkit")


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


def step(
    torch: Any,
    eager: Step,
    mode: str = REDUCE_OVERHEAD,
    contain: Callable[[Any], Any] = lambda compiled: compiled,
) -> Step:
    """`eager` with its forward pass and loss compiled into CUDA graphs (`mode`: one of
    torch.compile's modes that capture them, ``"reduce-overhead"`` or `AUTOTUNE`), what
    ``torch.compile`` returns passed through `contain` (tune's
    `accelkit.torch.tuning.compiling.contained`).

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
    forward_loss = replayed(torch, contain(torch.compile(eager.forward_loss, mode=mode)))
    return dataclasses.replace(eager, forward_loss=forward_loss, compiled=True)


def trees(torch: Any, device: Any) -> bool:
    """Whether inductor holds CUDA-graph trees for `device` on this thread: graphs that
    compiled code recorded and may replay (the script's own, or a trial's).

    >>> import torch
    >>> trees(torch, torch.device("cpu"))
    False
    """
    if device.type != "cuda":
        return False
    from torch._inductor import cudagraph_trees

    index = device.index if device.index is not None else torch.cuda.current_device()
    return cudagraph_trees.get_manager(index, create_if_none_exists=False) is not None


def left_behind(tried: Sequence[Trial], kept: Mapping[str, Any]) -> bool:
    """Whether trials of `tried` recorded CUDA graphs and the step kept (its settings)
    replays none: their memory pool stays reserved until `release`.

    >>> graphed = Trial("cudagraphs", {"compile": True, "cudagraphs": True}, "slower")
    >>> compiled = Trial("compile", {"compile": True}, "chosen")
    >>> left_behind([compiled, graphed], compiled.settings)
    True
    >>> left_behind([compiled], compiled.settings)
    False
    >>> left_behind([compiled, graphed], graphed.settings)
    False
    """
    recorded = any(t.settings.get("cudagraphs") and t.status != "skipped" for t in tried)
    return recorded and not kept.get("cudagraphs")


def release(torch: Any, device: Any) -> None:
    """Ends inductor's CUDA-graph trees on this thread and gives their memory pools back to
    the GPU. Only for trees the trials alone recorded, none of which the run replays: a
    compiled function whose tree was ended fails when it next replays. Never raises: the
    memory stays reserved, and a debug line says why."""
    try:
        from torch._inductor import cudagraph_trees

        if not trees(torch, device):  # the candidate failed before it recorded any
            return
        before = torch.cuda.memory_reserved(device)
        cudagraph_trees.reset_cudagraph_trees()
        gc.collect()  # a graph's nodes and the tensors they cache refer to each other
        torch.cuda.empty_cache()
        freed = (before - torch.cuda.memory_reserved(device)) / 2**30
    except Exception as error:  # noqa: BLE001 - memory left reserved never stops a run
        _log.debug("tune: the CUDA-graph trials' memory stays reserved (%s)", error)
        return
    _log.info("tune: the CUDA-graph trials not kept gave back %.2f GiB of GPU memory", freed)
