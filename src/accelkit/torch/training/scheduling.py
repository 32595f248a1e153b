"""The learning-rate scheduler of the loop that `accelkit.torch.fit` and `accelkit.torch.tune`
stand in for, stepped where that loop steps it.

tune's trials are real optimizer steps of the run: a scheduler the loop steps after each
optimizer step must be stepped after each trial step too, or every trial trains at the
schedule's first learning rate and the schedule ends short of where it was built to end
(a OneCycleLR over the run left at 3.7e-3 instead of 4e-8). An optimizer carries
``initial_lr`` in its parameter groups once a scheduler is bound to it
(``torch.optim.lr_scheduler.LRScheduler.__init__``), so a bound scheduler that was not
given is seen and refused by tune (a warning beside a shifted schedule would still be a
wrong run) and named by the fit, which never stepped one it was not given.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from accelkit.utils.imports import require

_log = logging.getLogger("accelkit")

INTERVALS = ("step", "epoch")  # Lightning's names for when a scheduler steps


@dataclasses.dataclass(frozen=True)
class Scheduling:
    """A checked scheduler and when it steps; with no scheduler, its calls do nothing.

    Attributes:
        scheduler: a ``torch.optim.lr_scheduler.LRScheduler`` of the fit's optimizer, or None.
        interval: ``"step"``: after each optimizer step; ``"epoch"``: after each epoch.

    Example:
        >>> import torch
        >>> optimizer = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=1.0)
        >>> decay = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        >>> scheduling = check(decay, optimizer, "step", refuse_unbound=True)
        >>> optimizer.step(); scheduling.after_optimizer_step(); scheduling.after_epoch()
        >>> optimizer.param_groups[0]["lr"]
        0.5
    """

    scheduler: Any = None
    interval: str = "step"

    def after_optimizer_step(self) -> None:
        if self.scheduler is not None and self.interval == "step":
            self.scheduler.step()

    def after_epoch(self) -> None:
        if self.scheduler is not None and self.interval == "epoch":
            self.scheduler.step()


def check(scheduler: Any, optimizer: Any, interval: str, *, refuse_unbound: bool) -> Scheduling:
    """`scheduler` checked against `optimizer`, or ValueError naming what is expected.

    Args:
        scheduler: the loop's LR scheduler, or None.
        optimizer: the optimizer the fit or tune steps.
        interval: one of `INTERVALS`.
        refuse_unbound: with no `scheduler`, refuse an `optimizer` that has one bound to
            it (tune); False only logs a warning (the fit, which never stepped one).

    Example:
        >>> import torch
        >>> optimizer = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=1.0)
        >>> check("cosine", optimizer, "step", refuse_unbound=True)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ValueError: scheduler='cosine' must be a torch.optim.lr_scheduler.LRScheduler of ...
    """
    if interval not in INTERVALS:
        raise ValueError(
            f"scheduler_interval={interval!r} is not one of {', '.join(map(repr, INTERVALS))}"
        )
    if scheduler is None:
        if _bound(optimizer):
            _unbound(optimizer, refuse=refuse_unbound)
        return Scheduling(None, interval)
    lr_scheduler = require("torch").optim.lr_scheduler
    # ValueError for every bad argument, as the project's other checks (TRY004 aside).
    if isinstance(scheduler, lr_scheduler.ReduceLROnPlateau):
        raise ValueError(  # noqa: TRY004
            "scheduler=ReduceLROnPlateau steps on a validation metric, which the trials "
            "and the fit do not give it: step it in your loop after each evaluation"
        )
    if not isinstance(scheduler, lr_scheduler.LRScheduler):
        raise ValueError(  # noqa: TRY004
            f"scheduler={scheduler!r} must be a torch.optim.lr_scheduler.LRScheduler of the "
            f"optimizer, or None for no scheduler; got {type(scheduler).__name__}"
        )
    if scheduler.optimizer is not optimizer:
        raise ValueError(
            f"scheduler={type(scheduler).__name__} schedules another optimizer "
            f"({type(scheduler.optimizer).__name__} at {id(scheduler.optimizer):#x}) than the "
            f"one given ({type(optimizer).__name__} at {id(optimizer):#x})"
        )
    return Scheduling(scheduler, interval)


def _bound(optimizer: Any) -> bool:
    """Whether a scheduler was built on `optimizer` (it set ``initial_lr`` in its groups)."""
    groups = getattr(optimizer, "param_groups", None) or ()
    return any(isinstance(group, dict) and "initial_lr" in group for group in groups)


def _unbound(optimizer: Any, *, refuse: bool) -> None:
    """A scheduler is bound to `optimizer` and was not given: refuse, or warn."""
    kind = type(optimizer).__name__
    if refuse:
        raise ValueError(
            f"the {kind} optimizer has an LR scheduler bound to it (its parameter groups "
            "carry 'initial_lr'), and tune's trial steps are real optimizer steps of the "
            "run: pass it as scheduler= (stepped after each optimizer step, or "
            "scheduler_interval='epoch'), so the trials follow the schedule"
        )
    _log.warning(
        "accelkit.torch.fit: the %s optimizer has an LR scheduler bound to it, which the "
        "fit does not step unless given: pass scheduler= to step it as a loop would",
        kind,
    )
