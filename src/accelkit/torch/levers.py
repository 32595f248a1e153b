"""The data-parallel levers: how `accelkit.torch.fit` wraps the model in DDP, and what
`tune` measures on it.

Applied by default, when accelkit wraps the model (the plan's
``ddp.gradient_as_bucket_view`` setting says why, `accelkit.planning.distribution`):

- ``gradient_as_bucket_view=True``: each gradient is a view into DDP's all-reduce
  bucket, so DDP copies no gradient into its bucket before the all-reduce nor back
  after it, and one gradient's worth of memory is spared (PyTorch's DDP docs). It
  changes nothing the run computes (tests/distributed: bit-identical parameters).
  Its one restriction, no ``detach_()`` on a gradient, is met by the fit's loop
  (``zero_grad(set_to_none=True)``, after which DDP points the gradient at its bucket
  again).
- the timing hook (`accelkit.torch.communication`): the same all-reduce as DDP's own,
  timed.

Measured by tune on the run's own model (candidates, kept only when clearly faster;
every rank runs the same candidates and rank 0's verdicts hold):

- ``bf16`` gradients: the all-reduce in bf16, as ``bf16_compress_hook``, half the
  bytes; only when the plan trains in bf16. It rounds each averaged gradient to bf16
  (8 significant bits), so the trial also compares one bucket's bf16 all-reduce
  with an fp32 one of the same gradients and drops the candidate past
  `BF16_GRADIENT_RTOL`.
- ``bucket_cap_mb=100`` (DDP's default is 25): fewer, larger all-reduces.
- ``static_graph=True``: DDP skips its per-step bookkeeping of which parameters are
  used, which a static graph does not need. Only when the script set neither
  ``static_graph`` nor ``find_unused_parameters``; a model whose graph changes fails
  the trial and is dropped with DDP's error.

The last two re-wrap the same module in a new `DistributedDataParallel` (the
parameters are shared; DDP's construction broadcasts rank 0's, equal on every rank
by then). A wrapper that loses is dropped; one that wins leaves the first wrapper
idle (its reducer ignores backward passes it did not prepare).

Options the script gives (``fit(..., ddp={...})``) are kept and not tried. A model
the script wrapped in DDP itself keeps its options and hook: it is timed when it has
no hook, and no DDP lever is tried on it.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from accelkit.hardware import environment
from accelkit.planning import Plan
from accelkit.planning.keys import Key
from accelkit.torch import distributed as parallel
from accelkit.torch import precision
from accelkit.torch.communication import BF16, COMPRESSIONS, NONE, GradientTimer, TimedHook
from accelkit.utils.imports import require

_log = logging.getLogger("accelkit")

# A bucket's bf16 all-reduce may differ from the fp32 one by this much (relative L2):
# bf16 keeps 8 significant bits, a relative rounding of at most 2^-9 = 0.2% per value,
# about 0.1-0.3% over a bucket (measured on 2 CPU ranks: 0.23%), plus the rounding of
# the partial sums on the way round the ring, which grows with the ranks.
BF16_GRADIENT_RTOL = 0.01
BUCKET_CAP_MB = 100  # DDP's default is 25
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
        self.note = None if self._timed else f"{environment.COMM_TIMING_ENV}=0: not timed"
        self.owned = True
        self.hooked = False

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
        """The DDP options in force (for the report and tune's records)."""
        if not self.owned:
            return {"wrapped_by": "the script"}
        return {
            "gradient_as_bucket_view": False,
            "bucket_cap_mb": 25,
            "static_graph": False,
            **self.options,
            COMPRESSION: self.hook.compression,
            **changes,
        }


@dataclasses.dataclass
class Lever:
    """One tune candidate on the DDP wrapper.

    Attributes:
        name: what the trial's name gets (``"bf16-grads"``).
        skip: why it is not tried (None: tried).
        apply: ``apply(best) -> Step``: the candidate step, built from the best so far.
        undo: puts the best so far back (after a failure or a loss); idempotent.
        verify: after the timed steps: why the candidate computes something else, or None.
    """

    name: str
    skip: str | None = None
    apply: Callable[[Any], Any] = lambda best: best
    undo: Callable[[], None] = lambda: None
    verify: Callable[[], str | None] = lambda: None


class Levers:
    """The DDP candidates of one fit's tune, in the order tried.

    Args:
        wrapping: how the module was wrapped.
        module: the module inside the wrapper.
        device: where it trains.
        plan: the plan in force (bf16 gradients only under a bf16 plan).

    Example:
        >>> import accelkit
        >>> import tempfile
        >>> import torch
        >>> import torch.distributed as dist
        >>> store = f"file://{tempfile.mkdtemp()}/store"   # a one-process group, for the example
        >>> dist.init_process_group("gloo", init_method=store, rank=0, world_size=1)
        >>> module, plan = torch.nn.Linear(4, 2), accelkit.plan_for(None)
        >>> device = torch.device("cpu")
        >>> wrapping = Wrapping(plan, {"bucket_cap_mb": 50})
        >>> ddp = wrapping.wrap(module, device)
        >>> found = list(Levers(wrapping, module, device, plan).candidates())
        >>> [(lever.name, lever.skip is None) for lever in found]  # tried: skip is None
        [('bf16-grads', False), ('buckets-100MB', False), ('static-graph', True)]
        >>> found[1].skip   # tune: step = lever.apply(best) for the others
        'bucket_cap_mb was set by the script'
        >>> dist.destroy_process_group()
    """

    def __init__(self, wrapping: Wrapping, module: Any, device: Any, plan: Plan) -> None:
        self._wrapping = wrapping
        self._module = module
        self._device = device
        self._plan = plan

    def candidates(self) -> Iterator[Lever]:
        if not self._wrapping.owned:
            yield Lever("ddp", skip="the script wrapped the model in DDP: its options are kept")
            return
        yield self._bf16()
        yield self._rewrap(
            "buckets-100MB",
            "bucket_cap_mb",
            {"bucket_cap_mb": BUCKET_CAP_MB},
        )
        fixed = self._wrapping.fixed & {"static_graph", "find_unused_parameters"}
        yield self._rewrap(
            "static-graph",
            "static_graph",
            {"static_graph": True},
            skip=f"ddp={{{', '.join(sorted(fixed))}}} was set by the script" if fixed else None,
        )

    def _bf16(self) -> Lever:
        torch = require("torch")
        hook = self._wrapping.hook
        skip = None
        if COMPRESSION in self._wrapping.fixed:
            skip = f"compression={self._wrapping.compression!r} was set by the script"
        elif not self._wrapping.hooked:
            skip = f"no accelkit communication hook on the wrapper ({self._wrapping.note})"
        elif precision.autocast_dtype(self._plan) is not torch.bfloat16:
            skip = (
                f"the plan trains in {self._plan.precision.value}, so gradients are "
                "all-reduced as computed (bf16 only under a bf16 plan)"
            )
        elif why := _no_bf16_collectives(torch, self._device):
            skip = why

        def apply(best: Any) -> Any:
            hook.compression, hook.probe = BF16, True
            return dataclasses.replace(best, ddp={**best.ddp, COMPRESSION: BF16})

        def undo() -> None:
            hook.compression, hook.probe = NONE, False

        def verify() -> str | None:
            error = hook.bf16_error()
            if error is None:
                return None
            if error > BF16_GRADIENT_RTOL:
                return (
                    f"bf16 gradients differ from fp32 by {error:.2%} (relative L2, one "
                    f"bucket), past {BF16_GRADIENT_RTOL * 100:g}%"
                )
            _log.debug("tune: bf16 gradients within %.3f%% of fp32", error * 100)
            return None

        return Lever("bf16-grads", skip=skip, apply=apply, undo=undo, verify=verify)

    def _rewrap(
        self, name: str, option: str, changes: dict[str, Any], skip: str | None = None
    ) -> Lever:
        if skip is None and option in self._wrapping.fixed:
            skip = f"{option} was set by the script"

        def apply(best: Any) -> Any:
            kept = {k: best.ddp[k] for k in ("bucket_cap_mb", "static_graph") if k in best.ddp}
            ddp = self._wrapping.wrap(self._module, self._device, **{**kept, **changes})
            step = best.through(ddp, best.compiled)
            return dataclasses.replace(step, ddp={**best.ddp, **changes})

        return Lever(name, skip=skip, apply=apply)


def _no_bf16_collectives(torch: Any, device: Any) -> str | None:
    """Why bf16 all-reduces cannot run here, or None (NCCL >= 2.10 or gloo can)."""
    if device.type != "cuda":
        return None
    try:
        version = torch.cuda.nccl.version()
    except Exception as error:  # noqa: BLE001 - no NCCL: no bf16 all-reduce to try
        return f"the NCCL version could not be read ({error})"
    if tuple(version) < (2, 10):
        return f"NCCL {'.'.join(map(str, version))} all-reduces bf16 from 2.10 on"
    return None


_LABELS = {
    (COMPRESSION, BF16): "bf16-grads",
    ("bucket_cap_mb", BUCKET_CAP_MB): "buckets-100MB",
    ("static_graph", True): "static-graph",
}
_TRIED = (COMPRESSION, "bucket_cap_mb", "static_graph")


def trial_settings(ddp: Mapping[str, Any]) -> dict[str, Any]:
    """The options tune tries, out of the DDP options in force (a trial's settings)."""
    return {key: ddp[key] for key in _TRIED if key in ddp}


def label(ddp: Mapping[str, Any]) -> str:
    """The tried options that are on, for a trial's name: ``"+bf16-grads"``, or ``""``.

    Example:
        >>> label({"compression": "bf16", "bucket_cap_mb": 25})
        '+bf16-grads'
    """
    return "".join(f"+{name}" for (key, value), name in _LABELS.items() if ddp.get(key) == value)
