"""How `accelkit.torch.fit` puts the model in DistributedDataParallel: the options
(the script's ``fit(..., ddp={...})`` and accelkit's defaults) and the timing hook.

Applied by default, when accelkit wraps the model (the plan's
``ddp.gradient_as_bucket_view`` setting says why, `accelkit.planning.distribution`):

- ``gradient_as_bucket_view=True``: each gradient is a view into DDP's all-reduce
  bucket, so DDP copies no gradient into its bucket before the all-reduce nor back
  after it, and one gradient's worth of memory is spared (PyTorch's DDP docs). It
  changes nothing the run computes (tests/distributed: bit-identical parameters).
  Its one restriction, no ``detach_()`` on a gradient, is met by the fit's loop
  (``zero_grad(set_to_none=True)``, after which DDP points the gradient at its bucket
  again).
- the timing hook (`accelkit.torch.distributed.communication`): the same all-reduce as DDP's own,
  timed.

What `tune` tries on top (bf16 gradients, larger buckets, a static graph, no buffer
broadcast) is `accelkit.torch.tuning.levers`. Options the script gives
(``fit(..., ddp={...})``) are kept and not tried. A model the script wrapped in DDP
itself keeps its options and hook: it is timed when it has no hook, and no DDP lever
is tried on it.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping
from typing import Any

from accelkit.hardware import environment
from accelkit.planning import Plan
from accelkit.planning.keys import Key
from accelkit.torch.distributed import parallel
from accelkit.torch.distributed.communication import COMPRESSIONS, NONE, GradientTimer, TimedHook
from accelkit.utils.imports import require

_log = logging.getLogger("accelkit")

COMPRESSION = "compression"  # accelkit's own key of fit(ddp=...), next to DDP's
_SET_BY_ACCELKIT = ("module", "device_ids", "output_device")


def check_options(ddp: Mapping[str, Any] | None) -> dict[str, Any]:
    """`ddp` (``fit(..., ddp=...)``) as a dict, or ValueError naming the valid keys.

    Its keys are `DistributedDataParallel`'s keyword arguments (``bucket_cap_mb``,
    ``static_graph``, ``find_unused_parameters``, ``gradient_as_bucket_view``...) but
    the module and devices, which accelkit sets; and ``"compression"``: ``"none"`` or
    ``"bf16"`` for the gradient all-reduce.

    Example:
        >>> check_options({"bucket_cap_mb": 50, "compression": "bf16"})
        {'bucket_cap_mb': 50, 'compression': 'bf16'}
    """
    if ddp is None:
        return {}
    if not isinstance(ddp, Mapping):
        raise TypeError(f"ddp= takes a dict of DistributedDataParallel options, got {ddp!r}")
    torch = require("torch")
    names = inspect.signature(torch.nn.parallel.DistributedDataParallel.__init__).parameters
    valid = sorted({*names} - {"self", *_SET_BY_ACCELKIT} | {COMPRESSION})
    wrong = [key for key in ddp if key not in valid]
    if wrong:
        raise ValueError(
            f"ddp={dict(ddp)!r}: {', '.join(map(repr, wrong))} is not an option; use "
            f"{', '.join(valid)}"
        )
    if ddp.get(COMPRESSION, NONE) not in COMPRESSIONS:
        raise ValueError(
            f"ddp={{'compression': {ddp[COMPRESSION]!r}}} is not valid; use one of "
            f"{', '.join(map(repr, COMPRESSIONS))}"
        )
    return dict(ddp)


class Wrapping:
    """How accelkit puts the module in DDP for one fit: the options, the timing hook.

    Args:
        plan: the plan in force (its ``ddp.gradient_as_bucket_view`` setting).
        options: the script's ``fit(..., ddp=...)`` (`check_options`); they win.

    Attributes:
        timer: the `GradientTimer` every wrapper's hook feeds; None when
            ``ACCELKIT_COMM_TIMING=0``.
        hook: the `TimedHook` registered on every wrapper accelkit times.
        note: why the all-reduce is not timed, when it is not.
        owned: whether accelkit built the wrapper (False: the script's own DDP).
        hooked: whether the last wrapper has the hook (bf16 gradients need it).
        buffers: how many buffers the module has (DDP broadcasts them before each
            forward unless ``broadcast_buffers=False``).

    Example:
        >>> import accelkit
        >>> import tempfile
        >>> import torch
        >>> import torch.distributed as dist
        >>> store = f"file://{tempfile.mkdtemp()}/store"   # a one-process group, for the example
        >>> dist.init_process_group("gloo", init_method=store, rank=0, world_size=1)
        >>> wrapping = Wrapping(accelkit.plan_for(None), {"bucket_cap_mb": 50})
        >>> ddp = wrapping.wrap(torch.nn.Linear(4, 2), torch.device("cpu"))
        >>> wrapping.settings()["bucket_cap_mb"], wrapping.hooked
        (50, True)
        >>> dist.destroy_process_group()
    """

    def __init__(self, plan: Plan, options: Mapping[str, Any]) -> None:
        given = dict(options)
        self.compression = str(given.pop(COMPRESSION, NONE))
        self.fixed = frozenset(options)
        self.options: dict[str, Any] = {}
        if plan.value(Key.DDP_BUCKET_VIEW, False):
            self.options["gradient_as_bucket_view"] = True
        self.options.update(given)
        self._timed = environment.comm_timing()
        self.timer: GradientTimer | None = None
        self.hook = TimedHook(None, self.compression)
        self.note = None if self._timed else environment.COMM_TIMING_OFF
        self.owned = True
        self.hooked = False
        self.buffers = 0

    def wrap(self, model: Any, device: Any, **changes: Any) -> Any:
        """`model` in DDP with the options (and `changes`), its all-reduce timed; a model
        the script wrapped keeps its options, and is timed if it has no hook."""
        torch = require("torch")
        if self._timed and self.timer is None and self.note is None:
            self.timer = self.hook.timer = GradientTimer(device)
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            self.owned = False
            self.attach(model, "the script's DistributedDataParallel")
            return model
        self.buffers = sum(1 for _ in model.buffers())
        ddp = parallel.wrap(model, device, **{**self.options, **changes})
        self.attach(ddp, "accelkit's DistributedDataParallel")
        return ddp

    def attach(self, ddp: Any, whose: str) -> None:
        """Register the hook on `ddp`; a model with a hook of its own keeps it, untimed."""
        self.hooked = False
        if self.timer is None and (not self.owned or self.hook.compression == NONE):
            return  # ACCELKIT_COMM_TIMING=0: DDP's own all-reduce, no hook
        try:
            self.hook.register(ddp)
            self.hooked = True
        except Exception as error:  # noqa: BLE001 - a hook of the script's: keep it
            self.timer = self.hook.timer = None
            self.note = (
                f"{whose} has a communication hook already ({type(error).__name__}: "
                f"{str(error).splitlines()[0] if str(error) else ''}); its all-reduce "
                "is not timed"
            )

    def measure(self, meter: Any) -> None:
        """Give `meter` the timer (it reads the marks at its window boundaries), or the
        reason there is none."""
        if self.timer is not None:
            self.timer.follow(meter.clock)
            meter.communication = self.timer
        elif self.note:
            meter.note("communication_share", self.note)

    def settings(self, **changes: Any) -> dict[str, Any]:
        """The DDP options in force, and the module's number of buffers (for the report
        and tune's records)."""
        if not self.owned:
            return {"wrapped_by": "the script"}
        return {
            "gradient_as_bucket_view": False,
            "bucket_cap_mb": 25,
            "static_graph": False,
            "broadcast_buffers": True,
            **self.options,
            COMPRESSION: self.hook.compression,
            **changes,
            "buffers": self.buffers,
        }

    def finish(self, module: Any, kept: Mapping[str, Any]) -> None:
        """At the end of the fit: when tune turned DDP's buffer broadcast off (`kept`, the
        options in force), give every rank rank 0's buffers once, as the broadcast before
        each forward would have (`accelkit.torch.tuning.levers`)."""
        if kept.get("broadcast_buffers") is not False or "broadcast_buffers" in self.fixed:
            return
        dist = require("torch").distributed
        try:
            for buffer in module.buffers():
                dist.broadcast(buffer, src=0)
        except Exception as error:  # noqa: BLE001 - the training is done: say it, go on
            _log.warning(
                "accelkit: the ranks' buffers were not made equal at the end of the fit "
                "(%s: %s); rank 0's are the run's",
                type(error).__name__,
                error,
            )
