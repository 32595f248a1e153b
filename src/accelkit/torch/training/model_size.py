"""The fit's plan completed with the size of the model it holds, before it is prepared.

`accelkit.auto_configure()` takes no model, so its plan has no memory estimate
(``plan.memory`` is None) and, under torchrun, would train any model with DDP: a whole
replica per GPU, which runs out of memory at the first step when the model's state does
not fit one GPU. Memory decides the parallelism (DESIGN.md): so before preparing the
model the fit counts it (`accelkit.torch.measuring.memory_probe.model_request`) and the
planner lays it out (`accelkit.planning.with_model_size`): FSDP2 where a replica does
not fit, the plan's own engine where it does. Activations are unknown before the first
step: the planner keeps them a share of the memory and says so in its reason. The
trainers' helpers (`accelkit.hf.training_arguments`, `accelkit.lightning.trainer_kwargs`)
do the same given the model (`trainer_plan`).
"""

from __future__ import annotations

import logging
from typing import Any

from accelkit.planning import Plan, lacks_model_size, with_model_size
from accelkit.planning.types import Optimizer
from accelkit.torch.distributed import parallel
from accelkit.torch.measuring.memory_probe import model_request, optimizer_kind, unwrapped

_log = logging.getLogger("accelkit")


def plan_with_model(
    plan: Plan, model: Any, optimizer: Any, *, door: str = "accelkit.torch.fit"
) -> tuple[Plan, str]:
    """`plan` laid out for `model` trained by `optimizer` where it was made without the
    model's size (`accelkit.planning.lacks_model_size`), and what the report says of it
    ("" when `plan` is followed as given). Never raises: a model that cannot be counted
    leaves `plan` as it was, with a warning in the log and the reason.

    Args:
        plan: the plan the fit (or a trainer's arguments) follows.
        model: the module (or the script's DDP wrapper around it).
        optimizer: the fit's optimizer; None where it is not built yet (a trainer builds
            its own); one the memory model does not know, or None, is counted as AdamW
            (the planner's default and the trainers'), which the note says.
        door: who asks, named in the log.

    Example:
        >>> import accelkit
        >>> import torch
        >>> model = torch.nn.Linear(1024, 1024)
        >>> two = accelkit.planning.plan(accelkit.what_if("H100", 2))
        >>> sized, note = plan_with_model(two, model, torch.optim.AdamW(model.parameters()))
        >>> sized.memory.choice, note.split(" (")[0]
        ('ddp', "planned from the model's 1,049,600 parameters")
    """
    if not lacks_model_size(plan):
        return plan, ""
    try:
        return _planned(plan, model, optimizer, door)
    except Exception as error:  # noqa: BLE001 - never the reason a run fails (DESIGN.md)
        why = (
            f"not planned from the model ({type(error).__name__}: {error}): the plan is "
            "followed as given, without a memory estimate"
        )
        _log.warning("%s: the layout was %s", door, why)
        return plan, why


def trainer_plan(plan: Plan, model: Any, door: str) -> Plan:
    """`plan` laid out for the `model` a trainer will train (`plan_with_model`, its
    optimizer not built yet), for `door`, a trainer's helper.

    Raises:
        TypeError: `model` is not a module (it has no ``parameters()``).

    Example:
        >>> import accelkit
        >>> import torch
        >>> two = accelkit.planning.plan(accelkit.what_if("H100", 2))
        >>> trainer_plan(two, torch.nn.Linear(64, 64), "example").memory.choice
        'ddp'
    """
    if not callable(getattr(model, "parameters", None)):
        raise TypeError(
            f"{door}(plan, model=...): model must be the torch.nn.Module the trainer "
            f"trains (a LightningModule, a transformers PreTrainedModel), not "
            f"{type(model).__name__}"
        )
    return plan_with_model(plan, model, None, door=door)[0]


def _planned(plan: Plan, model: Any, optimizer: Any, door: str) -> tuple[Plan, str]:
    kind = None if optimizer is None else optimizer_kind(optimizer)
    size = model_request(parallel.unwrap(model), kind or Optimizer.ADAMW)
    sized = with_model_size(plan, size)
    memory = sized.memory
    if memory is None:
        return plan, ""
    assumed = ""
    if optimizer is None:
        assumed = "; the optimizer is not built yet, counted as adamw (the planner's default)"
    elif kind is None:
        assumed = (
            f"; {type(unwrapped(optimizer)).__name__} is unknown to the memory model, "
            "counted as adamw (the planner's default)"
        )
    trainable = (
        f"{memory.trainable_params:,} trainable, the frozen ones in {size.frozen_dtype.value}"
        if memory.trainable_params < memory.params
        else "all trainable"
    )
    note = (
        f"planned from the model's {memory.params:,} parameters ({trainable}, "
        f"{memory.optimizer}{assumed}; activations unknown) before the first step, as the "
        f"plan had no model size: {memory.choice} (distribution {sized.distribution.value}; "
        "the plan's memory has the numbers)"
    )
    # Said where it changes the run (or cannot fit); the report's note holds it always.
    changed = sized.distribution is not plan.distribution or memory.choice not in ("none", "ddp")
    log = _log.warning if not memory.fits else _log.info if changed else _log.debug
    log("%s: layout %s: %s", door, note, memory.reason)
    return sized, note
