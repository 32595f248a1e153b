"""The first part of `accelkit.torch.fit`: the model and the data as the loop trains them.

The model goes to its device (channels-last for conv nets when the plan says so)
and, under a process group, into `DistributedDataParallel` (or, when the plan shards
it, FSDP2's ``fully_shard``: `accelkit.torch.distributed.sharding`), with the loader
sharded by rank (`accelkit.torch.distributed.parallel`). `to_device` moves each batch
after it.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from accelkit.planning import Plan
from accelkit.planning.keys import Key
from accelkit.torch.distributed import parallel, sharding
from accelkit.torch.distributed.wrapping import Wrapping
from accelkit.utils.imports import require


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A model and loader ready for the loop.

    Attributes:
        model: what the step calls: the `DistributedDataParallel` wrapper under a
            process group, else the module itself.
        module: the module inside, where FLOPs are counted and facts read.
        loader: the loader; under a process group, rebuilt with a `DistributedSampler`
            where that is possible.
        device: where the model lives and the batches go.
        layout: ``torch.channels_last`` when the model was converted (4-d float batches
            follow it), else None.
        group: this process's place in the process group, or None when it trains alone.
        sampling: what was done to the loader for the process group, or None.
        wrapping: how the model was put in DDP (`accelkit.torch.distributed.wrapping.Wrapping`: its
            options, the all-reduce timing), or None without a process group or under FSDP2.
        sharded: what FSDP2 did to the module (`accelkit.torch.distributed.sharding.Sharded`)
            when the plan shards it under a process group, else None; `model` is then the
            module itself, sharded in place.
        changes: what was done in place to the user's module (moved to a device,
            converted to channels-last), for the report; `restore` undoes the layout.
    """

    model: Any
    module: Any
    loader: Iterable[Any]
    device: Any
    layout: Any = None
    group: parallel.World | None = None
    sampling: str | None = None
    changes: tuple[str, ...] = ()
    wrapping: Any = None
    sharded: sharding.Sharded | None = None


def prepare(
    model: Any,
    loader: Iterable[Any],
    plan: Plan,
    *,
    device: Any,
    channels_last: bool | None,
    group: parallel.World | None,
    ddp: Mapping[str, Any] | None = None,
    optimizer: Any = None,
    shard_alone: bool = False,
) -> Prepared:
    """Place `model` (and wrap it for `group`), shard `loader`, and set training mode.

    Args:
        model: a module, or one the script already wrapped in DDP (kept as it is,
            on its device, when `group` is given; unwrapped otherwise).
        loader: the batches.
        plan: the plan in force (its channels-last choice, its GPUs).
        device: where to train; None: the GPU of this rank, or the CPU.
        channels_last: convert conv models to channels-last; None: the plan's choice.
        group: the process group to train in, or None to train this process alone.
        ddp: the script's DDP options (`accelkit.torch.distributed.wrapping.check_options`), for the
            wrapper built under `group`.
        optimizer: the fit's optimizer: when the plan shards the model with FSDP2, its
            parameter groups are given the sharded parameters
            (`accelkit.torch.distributed.sharding.follow_parameters`).
        shard_alone: without `group`, shard with FSDP2 all the same when the plan says so,
            in a process group of this one process (a plan that offloads the state of a
            model larger than its one GPU; torchrun with one rank).

    Example:
        >>> import accelkit
        >>> import torch
        >>> model, loader = torch.nn.Linear(4, 2), [(torch.randn(8, 4), torch.zeros(8).long())]
        >>> plan = accelkit.plan_for(None)
        >>> run = prepare(model, loader, plan, device="cpu", channels_last=None, group=None)
        >>> run.device
        device(type='cpu')
    """
    torch = require("torch")
    module = parallel.unwrap(model)
    layout = None
    changes: list[str] = []
    asked = checked_device(torch, device) if device is not None else None
    if module is not model:  # the script's own DDP (its options kept): already placed
        device = next(module.parameters()).device
    else:
        device = asked if asked is not None else _default_device(torch, plan)
        before = _devices(module)
        model = module = module.to(device)
        if before != _devices(module):
            changes.append(f"moved to {device} in place (nn.Module.to)")
        if _wants_channels_last(torch, module, plan, channels_last):
            model = module = module.to(memory_format=torch.channels_last)
            layout = torch.channels_last  # images follow: the first conv needs no transpose
            changes.append(
                "converted to channels-last memory format in place (undone if the fit raises)"
            )
    sampling = wrapping = sharded = None
    if (group is not None or shard_alone) and module is model and sharding.wanted(plan):
        sharded = sharding.shard(module, plan, device, optimizer)
        changes.append(sharded.change())
        if group is not None:
            loader, sampling = _sharded(loader, group, device)
    elif group is not None:
        wrapping = Wrapping(plan, ddp or {})
        model = wrapping.wrap(model, device)
        loader, sampling = _sharded(loader, group, device)
    else:
        model = module  # distributed=False: the module alone, even if the script wrapped it
    if mode := _training_mode(module):
        changes.append(mode)
    model.training = True  # the wrapper's own flag; the module's are _training_mode's
    return Prepared(
        model=model,
        module=module,
        loader=loader,
        device=device,
        layout=layout,
        group=group,
        sampling=sampling,
        changes=tuple(changes),
        wrapping=wrapping,
        sharded=sharded,
    )


def _sharded(loader: Any, group: parallel.World, device: Any) -> tuple[Any, str]:
    """`loader` sharded by rank (`parallel.shard`) and cut to the shortest rank's length
    where the ranks' lengths differ (`parallel.even`), and what was done."""
    loader, sampling = parallel.shard(loader, group)
    loader, cut = parallel.even(loader, group, device)
    return loader, f"{sampling}; {cut}" if cut else sampling


def restore(run: Prepared) -> None:
    """Undo the channels-last conversion `prepare` made to the user's module (when a fit
    raises, the script's own recovery gets the layout it built). Never raises: the fit's
    error is the one to see.

    Example:
        >>> import accelkit
        >>> import torch
        >>> model = torch.nn.Conv2d(3, 8, 3)
        >>> run = prepare(model, [], accelkit.plan_for(None), device="cpu", channels_last=True,
        ...               group=None)
        >>> try:
        ...     raise RuntimeError("the fit failed")
        ... except RuntimeError:
        ...     restore(run)  # before re-raising
        >>> model.weight.is_contiguous()
        True
    """
    if run.layout is None:
        return
    with contextlib.suppress(Exception):  # the fit's own error is the one to raise
        run.module.to(memory_format=require("torch").contiguous_format)


_DEVICES = "None (this rank's GPU, or the CPU), 'cpu', 'cuda', 'cuda:N' or a torch.device"


def checked_device(torch: Any, device: Any) -> Any:
    """`device` as a ``torch.device`` this process can train on, or ValueError naming the
    valid values (a bad name, a GPU this torch cannot see, ``"meta"``, which holds no
    data), before the model moves.

    Example:
        >>> import torch
        >>> checked_device(torch, "bogus")  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        ValueError: device='bogus' cannot be used: it must be None (this rank's GPU, ...
    """
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as error:
        said = str(error).split(" device type at start")[0][:80]
        raise ValueError(
            f"device={device!r} cannot be used: it must be {_DEVICES} (torch says: {said}...)"
        ) from None
    if parsed.type == "meta":
        raise ValueError(
            f"device={device!r}: meta tensors hold no data, so nothing trains there; "
            f"it must be {_DEVICES}"
        )
    backend = getattr(torch, parsed.type, None) if parsed.type != "cpu" else None
    available = getattr(backend, "is_available", None)
    if callable(available) and not available():
        raise ValueError(
            f"device={device!r}: this torch ({torch.__version__}) sees no {parsed.type} "
            f"device; it must be {_DEVICES}, or None for the CPU here"
        )
    count = getattr(backend, "device_count", None)
    if parsed.index is not None and callable(count) and parsed.index >= count():
        raise ValueError(
            f"device={device!r}: this process sees {count()} {parsed.type} device(s), "
            f"indexed from 0"
        )
    return parsed


def _training_mode(module: Any) -> str:
    """Put `module` in training mode the way the script left it to: a module that was
    put in eval mode as a whole (``model.eval()`` after an evaluation) trains again in
    training mode; otherwise each submodule keeps the mode the script set (a BatchNorm
    frozen in eval mode when fine-tuning stays frozen, as in Lightning 2.2+). Returns
    what was done, for the report's model changes ("" when nothing was)."""
    modules = list(module.named_modules())
    if not any(m.training for _, m in modules):
        module.train()
        return "put in training mode (it was in eval mode)"
    module.training = True  # its own flag only: its submodules keep theirs
    frozen = [f"{name} ({type(m).__name__})" for name, m in modules if name and not m.training]
    if not frozen:
        return ""
    shown = ", ".join(frozen[:4]) + (", ..." if len(frozen) > 4 else "")
    return f"{len(frozen)} submodule(s) left in eval mode as the script set them: {shown}"


def _devices(module: Any) -> set[Any]:
    return {t.device for t in (*module.parameters(), *module.buffers())}


def _default_device(torch: Any, plan: Plan) -> Any:
    if torch.cuda.is_available() and plan.hardware.gpus:
        rank = plan.hardware.launcher.local_rank or 0
        return torch.device("cuda", rank % torch.cuda.device_count())
    return torch.device("cpu")


def _wants_channels_last(torch: Any, module: Any, plan: Plan, asked: bool | None) -> bool:
    """Asked for, or the plan's choice for a conv net: two convolutions or more. NHWC pays
    by sparing the transposes between consecutive convolutions; a single one (a ViT's
    patch embedding, a stem before linear layers) gains nothing and costs its input's."""
    wanted = plan.value(Key.CHANNELS_LAST, False) if asked is None else asked
    convolutions = sum(isinstance(m, (torch.nn.Conv2d, torch.nn.Conv3d)) for m in module.modules())
    return bool(wanted) and convolutions >= (1 if asked else 2)


def to_device(batch: Any, device: Any, layout: Any = None) -> Any:
    """Copy a batch to `device` (non-blocking: overlaps when the loader pins memory);
    4-d float tensors take `layout` (channels-last) when given.

    Example:
        >>> import torch
        >>> x, y = to_device((torch.zeros(8, 3), torch.ones(8)), torch.device("cpu"))
        >>> x.device
        device(type='cpu')
    """
    if hasattr(batch, "to") and hasattr(batch, "shape"):
        if layout is not None and batch.dim() == 4 and batch.is_floating_point():
            return batch.to(device, non_blocking=True, memory_format=layout)
        return batch.to(device, non_blocking=True)
    if isinstance(batch, (list, tuple)):
        moved = [to_device(b, device, layout) for b in batch]
        # A namedtuple is built from its fields, a tuple or list from one iterable.
        return type(batch)(*moved) if hasattr(batch, "_fields") else type(batch)(moved)
    if isinstance(batch, Mapping):  # a dict, or transformers' BatchEncoding (a UserDict)
        return {k: to_device(v, device, layout) for k, v in batch.items()}
    return batch
