"""The data-parallel levers `tune` measures on the run's own model (candidates, kept only
when clearly faster; every rank runs the same candidates and rank 0's verdicts hold).
How `accelkit.torch.fit` wraps the model in DDP, and what it applies by default, is
`accelkit.torch.distributed.wrapping`.

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
- ``broadcast_buffers=False``: DDP stops broadcasting rank 0's buffers (BatchNorm's
  running statistics) before every forward: a collective and a copy per buffer each
  step, which a host-bound step pays in full (ResNet-50 at 64 per GPU on one H200: the
  DDP step x0.89 without it, in paired rounds, benchmarks/ddp_cost.py). The
  training-mode forward of a normalisation layer reads the batch's statistics, not the
  running ones, so the gradients are the same, and rank 0's buffers are too (they only
  ever see rank 0's batches); the other ranks' running statistics drift apart until the
  end of the fit, which broadcasts rank 0's buffers once (`Wrapping.finish`). A buffer
  outside a normalisation layer that changes during the trial (a counter, a queue the
  forward reads) fails the candidate: broadcasting keeps such a buffer equal across ranks.

The last three re-wrap the same module in a new `DistributedDataParallel` (the
parameters are shared; DDP's construction broadcasts rank 0's, equal on every rank
by then). A wrapper that loses is dropped; one that wins leaves the first wrapper
idle (its reducer ignores backward passes it did not prepare).

Options the script gives (``fit(..., ddp={...})``) are kept and not tried; no lever is
tried on a model the script wrapped in DDP itself.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from accelkit.frameworks import torch_precision
from accelkit.planning import Plan
from accelkit.torch.distributed.communication import BF16, NONE
from accelkit.torch.distributed.wrapping import COMPRESSION, Wrapping
from accelkit.torch.tuning.candidate import Candidate, Skipped
from accelkit.utils.imports import require

if TYPE_CHECKING:
    from accelkit.torch.tuning.engine import Engine

_log = logging.getLogger("accelkit")

# A bucket's bf16 all-reduce may differ from the fp32 one by this much (relative L2):
# bf16 keeps 8 significant bits, a relative rounding of at most 2^-9 = 0.2% per value,
# about 0.1-0.3% over a bucket (measured on 2 CPU ranks: 0.23%), plus the rounding of
# the partial sums on the way round the ring, which grows with the ranks.
BF16_GRADIENT_RTOL = 0.01
BUCKET_CAP_MB = 100  # DDP's default is 25
# The candidates `Levers.candidates` yields: bf16 gradients, larger buckets, a static
# graph, no buffer broadcast.
CANDIDATES = 4


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


class NoWrapper:
    """No DDP wrapper to tune (FSDP2 shards the model): one candidate, skipped, saying why.

    Example:
        >>> [lever.skip for lever in NoWrapper("sharded with FSDP2").candidates()]
        ['sharded with FSDP2']
    """

    def __init__(self, why: str) -> None:
        self._why = why

    def candidates(self) -> Iterator[Lever]:
        yield Lever("ddp", skip=self._why)


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
        >>> len(found) == CANDIDATES
        True
        >>> [lever.name for lever in found if lever.skip is None]  # tried; skip says why not
        ['static-graph']
        >>> found[1].skip   # tune: step = lever.apply(best) for the others
        'bucket_cap_mb was set by the script'
        >>> found[3].skip
        'the model has no buffers: DDP broadcasts none'
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
        yield self._no_broadcast()

    def _bf16(self) -> Lever:
        torch = require("torch")
        hook = self._wrapping.hook
        skip = None
        if COMPRESSION in self._wrapping.fixed:
            skip = f"compression={self._wrapping.compression!r} was set by the script"
        elif not self._wrapping.hooked:
            skip = f"no accelkit communication hook on the wrapper ({self._wrapping.note})"
        elif torch_precision.autocast_dtype(self._plan) is not torch.bfloat16:
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
            kept = {k: best.ddp[k] for k in _REWRAPPED if k in best.ddp}
            ddp = self._wrapping.wrap(self._module, self._device, **{**kept, **changes})
            step = best.through(ddp, best.compiled)
            return dataclasses.replace(step, ddp={**best.ddp, **changes})

        return Lever(name, skip=skip, apply=apply)

    def _no_broadcast(self) -> Lever:
        buffers = dict(self._module.named_buffers())
        lever = self._rewrap(
            "no-buffer-broadcast",
            "broadcast_buffers",
            {"broadcast_buffers": False},
            skip=None if buffers else "the model has no buffers: DDP broadcasts none",
        )
        statistics = _normalisation_buffers(require("torch"), self._module)
        watched = {name: b for name, b in buffers.items() if name not in statistics}
        # A tensor's version counts its in-place changes (autograd's own check of saved
        # tensors): cheaper than a copy of every buffer to compare.
        versions: dict[str, int] = {}
        wrap = lever.apply

        def apply(best: Any) -> Any:
            versions.update({name: buffer._version for name, buffer in watched.items()})
            return wrap(best)

        def verify() -> str | None:
            changed = [n for n, b in watched.items() if b._version != versions.get(n)]
            if not changed:
                return None
            return (
                f"buffer {changed[0]!r} changed during training and is not a normalisation "
                "layer's running statistic: broadcast_buffers keeps it equal across ranks"
            )

        lever.apply, lever.verify = apply, verify
        return lever


def _normalisation_buffers(torch: Any, module: Any) -> set[str]:
    """Names of the buffers of `module`'s normalisation layers (BatchNorm, InstanceNorm
    with running statistics): updated in training, read only in evaluation."""
    found: set[str] = set()
    for prefix, layer in module.named_modules():
        if isinstance(layer, torch.nn.modules.batchnorm._NormBase):
            found.update(
                f"{prefix}.{name}" if prefix else name
                for name, _ in layer.named_buffers(recurse=False)
            )
    return found


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
    ("broadcast_buffers", False): "no-buffer-broadcast",
}
_REWRAPPED = ("bucket_cap_mb", "static_graph", "broadcast_buffers")  # options of the wrapper
_TRIED = (COMPRESSION, *_REWRAPPED)


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


def lever(engine: Engine) -> Iterator[Candidate | Skipped]:
    """tune's DDP levers, each on top of the best so far, as the door switches them
    (`accelkit.torch.tuning.engine.Door.step_switch`); none without DDP."""
    for one in engine.door.ddp_levers():
        if one.skip:
            yield Skipped(one.name, one.skip)
        else:
            yield engine.door.step_switch(one)
