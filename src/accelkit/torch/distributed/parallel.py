"""Data parallelism for `accelkit.torch.fit`: DDP, the sampler, the per-rank figures.

Under `torchrun`, `auto_configure()` starts the process group (see
`accelkit.frameworks.torch_adapter.apply_process_group`); this module is what
the training loop does with it:

- `wrap` puts the model in `DistributedDataParallel` (never `DataParallel`);
- `shard` gives a `DataLoader` a `DistributedSampler`, so each rank trains on
  its own 1/world of the data;
- `sync_gradients` averages gradients left un-synchronised by `no_sync()` micro-steps
  when a run ends part-way through an accumulation;
- `gather` collects every rank's figures in one `all_gather_object` at the end of
  a run, for `accelkit.profiling.world.aggregate`;
- `why_alone` says why a run that could use several devices trains on one.

The rest is a no-op without an initialised process group of more than one rank.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import itertools
import logging
from typing import TYPE_CHECKING, Any

from accelkit.frameworks.torch_adapter import settle_at_exit
from accelkit.hardware import environment
from accelkit.planning.keys import Key
from accelkit.planning.types import Status
from accelkit.profiling import world as run_world
from accelkit.report.assemble import with_advice
from accelkit.utils.imports import require

_log = logging.getLogger("accelkit")

if TYPE_CHECKING:
    from accelkit.hardware.info import HardwareInfo
    from accelkit.planning.types import Plan
    from accelkit.profiling.run_report import RunReport


@dataclasses.dataclass(frozen=True)
class World:
    """This process's place in the process group."""

    rank: int
    size: int
    backend: str

    @property
    def is_zero(self) -> bool:
        return self.rank == 0


def world() -> World | None:
    """The initialised process group, when it has more than one rank; else None."""
    torch = require("torch")
    dist = torch.distributed
    if not dist.is_available() or not dist.is_initialized():
        return None
    size = dist.get_world_size()
    if size < 2:
        return None
    return World(rank=dist.get_rank(), size=size, backend=str(dist.get_backend()))


def is_rank_zero() -> bool:
    """True on rank 0 of the process group, or when there is none (RANK unset or 0)."""
    group = world()
    if group is not None:
        return group.is_zero
    return environment.is_rank_zero()


def wrap(model: Any, device: Any, **options: Any) -> Any:
    """`model` in `DistributedDataParallel` on `device` (already a DDP model: unchanged).

    On CUDA the replica lives on this rank's GPU (``device_ids=[device.index]``); on
    the CPU (gloo) DDP takes no device ids. `options` are DDP's keyword arguments
    (``bucket_cap_mb``, ``gradient_as_bucket_view``...; `accelkit.torch.tuning.levers`).
    """
    torch = require("torch")
    ddp = torch.nn.parallel.DistributedDataParallel
    if isinstance(model, ddp):
        return model
    if device.type == "cuda":
        return ddp(model, device_ids=[device.index], output_device=device.index, **options)
    return ddp(model, **options)


def unwrap(model: Any) -> Any:
    """The module inside a `DistributedDataParallel` wrapper (or `model` itself)."""
    torch = require("torch")
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return model.module
    return model


# -- data ------------------------------------------------------------------------------


def shard(loader: Any, group: World) -> tuple[Any, str]:
    """`loader` rebuilt with a `DistributedSampler` for this rank, and what was done.

    A `DataLoader` over a map-style dataset whose sampler is PyTorch's sequential or
    random one is rebuilt with the same settings (batch size, workers, pinning,
    collate_fn, drop_last, persistent workers, prefetch factor, worker_init_fn,
    generator...) and ``DistributedSampler(shuffle=<the original was random>)``,
    which pads the last rank's share so every rank runs the same number of steps
    (unequal step counts would leave a rank waiting in an all-reduce).
    Any other loader is returned as it is, with the reason: a loader that already
    shards, a custom sampler or batch sampler (accelkit cannot know how to split it),
    an `IterableDataset` (shard it in ``__iter__`` with the rank), or another iterable.
    """
    torch = require("torch")
    data = torch.utils.data
    if not isinstance(loader, data.DataLoader):
        return loader, (
            f"{type(loader).__name__} is not a DataLoader: each rank trains on "
            "what it yields; shard it by rank yourself"
        )
    sampler = loader.sampler
    if isinstance(sampler, data.distributed.DistributedSampler):
        return loader, "the DataLoader already has a DistributedSampler"
    if isinstance(loader.dataset, data.IterableDataset):
        return loader, (
            "an IterableDataset has no sampler: each rank reads the whole "
            "stream unless the dataset shards by rank itself"
        )
    if type(loader.batch_sampler) is not data.BatchSampler or loader.batch_size is None:
        return loader, (
            "a custom batch_sampler: accelkit cannot shard it; use a DistributedSampler yourself"
        )
    if type(sampler) is data.RandomSampler:
        if sampler.replacement or sampler._num_samples is not None:
            return loader, (
                "a RandomSampler with replacement or num_samples: accelkit "
                "cannot shard it; use a DistributedSampler yourself"
            )
        shuffle = True
    elif type(sampler) is data.SequentialSampler:
        shuffle = False
    else:
        return loader, (
            f"a custom sampler ({type(sampler).__name__}): accelkit cannot shard "
            "it; wrap it for DistributedSampler yourself"
        )
    distributed = data.distributed.DistributedSampler(
        loader.dataset, num_replicas=group.size, rank=group.rank, shuffle=shuffle
    )
    rebuilt = data.DataLoader(loader.dataset, sampler=distributed, **_loader_settings(loader))
    order = "shuffled" if shuffle else "in order"
    return rebuilt, (
        f"DistributedSampler added by accelkit.torch.fit: rank {group.rank} "
        f"of {group.size} trains on {len(distributed)} of {len(loader.dataset)} "
        f"samples per epoch, {order}"
    )


def even(loader: Any, group: World, device: Any) -> tuple[Any, str | None]:
    """`loader`, cut to the shortest rank's length where the ranks' loaders differ, and
    why (None where they agree or a length is unknown): a rank that ran out of batches
    goes on to the fit's end while another waits in a collective the first never reaches
    (under FSDP2 gloo aborts the job; NCCL waits until its timeout). One
    ``all_gather_object`` of each rank's ``len(loader)``, a collective every rank reaches.

    A `DataLoader` that `shard` rebuilt is even already (`DistributedSampler` pads);
    what is cut is each rank's own shard of another kind, told by its ``__len__``.
    """
    try:
        length: int | None = len(loader)
    except TypeError:  # an iterable without a length: nothing to compare
        length = None
    lengths = [rank["batches"] for rank in gather({"batches": length}, device)]
    if None in lengths or len(set(lengths)) == 1:
        return loader, None
    shortest = min(lengths)
    each = ", ".join(f"rank {rank}: {n}" for rank, n in enumerate(lengths))
    why = (
        f"the ranks' loaders differ in length ({each} batches an epoch): every rank trains "
        f"{shortest} an epoch, the shortest, so that none waits in a collective the "
        "others never reach; give each rank as many batches to train them all"
    )
    warn(why)
    return Shortened(loader, shortest), why


class Shortened:
    """The first `length` batches of `loader` each epoch (its other attributes its own).

    Example:
        >>> cut = Shortened([1, 2, 3, 4], 2)
        >>> list(cut), len(cut)
        ([1, 2], 2)
    """

    def __init__(self, loader: Any, length: int) -> None:
        self.loader, self.length = loader, length

    def __iter__(self) -> Any:
        return itertools.islice(iter(self.loader), self.length)

    def __len__(self) -> int:
        return self.length

    def __getattr__(self, name: str) -> Any:  # batch_size, dataset, sampler: the loader's
        return getattr(self.__dict__["loader"], name)


_NOT_COPIED = {"self", "dataset", "shuffle", "sampler", "batch_sampler"}


def _loader_settings(loader: Any) -> dict[str, Any]:
    """The DataLoader's own constructor arguments, read back from it (those this
    PyTorch version accepts), except its dataset and sampling."""
    torch = require("torch")
    names = inspect.signature(torch.utils.data.DataLoader.__init__).parameters
    settings = {
        name: getattr(loader, name)
        for name in names
        if name not in _NOT_COPIED and hasattr(loader, name)
    }
    if not settings.get("num_workers"):
        settings.pop("prefetch_factor", None)  # only valid with worker processes
    return settings


def set_epoch(loader: Any, epoch: int) -> None:
    """Tell a `DistributedSampler` the epoch, so each epoch shuffles differently
    (the same way on every rank)."""
    sampler: Any = getattr(loader, "sampler", None)
    if hasattr(sampler, "set_epoch"):
        sampler.set_epoch(epoch)


# -- gradients -------------------------------------------------------------------------


def sync_gradients(model: Any, group: World) -> None:
    """Average the gradients across ranks, as DDP's backward would have.

    For the last optimizer step of a run that ends part-way through an
    accumulation: those micro-steps ran under ``no_sync()``, so each rank holds
    only its own sum; stepping on it would let the replicas drift apart.
    """
    torch = require("torch")
    for parameter in unwrap(model).parameters():
        if parameter.grad is not None:
            torch.distributed.all_reduce(parameter.grad)
            parameter.grad.div_(group.size)


# -- figures ---------------------------------------------------------------------------


def gather(figures: dict[str, Any], device: Any) -> list[dict[str, Any]]:
    """Every rank's `figures`, in rank order: one ``all_gather_object``, a collective
    that every rank must reach. Often a script's last collective: the exit then waits
    for the communication threads to release it (`settle_at_exit`)."""
    torch = require("torch")
    settle_at_exit()
    gathered: list[Any] = [None] * torch.distributed.get_world_size()
    context = (
        torch.cuda.device(device)
        if getattr(device, "type", "cpu") == "cuda"
        else contextlib.nullcontext()
    )
    with context:  # NCCL serialises the objects through the current device
        torch.distributed.all_gather_object(gathered, figures)
    return [dict(item) for item in gathered]


def gather_run(
    report: RunReport,
    samples: int,
    *,
    device: Any,
    single_device: float | None,
    hardware: HardwareInfo,
    plan: Plan,
) -> None:
    """Replace this rank's figures in `report` by the whole run's: one all_gather_object.

    Outside a process group it does nothing; when the gather fails, the local
    figures stand and the report says why.
    """
    group = world()
    if group is None:
        return
    figures = run_world.rank_figures(report, group.rank, samples)
    figures.update(
        tokens_per_second=report.tokens_per_second,
        real_tokens_per_second=report.real_tokens_per_second,
        mfu=report.mfu,
        achieved_tflops=report.achieved_tflops,
    )
    try:
        ranks = gather(figures, device)
    except Exception as error:  # noqa: BLE001 - the local report still stands
        report.note(
            "world_size",
            f"could not gather the other ranks' figures: {type(error).__name__}: {error}",
        )
        return
    for field in ("global_samples_per_second", "scaling_efficiency"):
        report.notes.pop(field, None)
    run_world.aggregate(report, ranks, single_device)
    report.facts.update(rank=group.rank, backend=group.backend)
    with_advice(report, hardware, plan)


def broadcast(value: Any, device: Any = None) -> Any:
    """Rank 0's `value` on every rank (the other ranks wait for it here)."""
    torch = require("torch")
    box = [value]
    context = (
        torch.cuda.device(device)
        if getattr(device, "type", "cpu") == "cuda"
        else contextlib.nullcontext()
    )
    with context:
        torch.distributed.broadcast_object_list(box, src=0)
    return box[0]


def why_alone(plan: Plan, group: World | None, distributed: bool, chatty: bool) -> str | None:
    """Why a run that could use several devices trains this process alone, said on
    stderr: the reason the process group is missing, if it failed to start (on every
    rank: the failing one may not be rank 0). Otherwise None, after printing the
    planner's torchrun hint when `chatty` and there are several GPUs and no launcher.

    Args:
        plan: the plan in force.
        group: the process group, or None.
        distributed: False when the caller chose to train alone (nothing to say).
        chatty: print the torchrun hint (rank 0 with progress on).

    Example:
        >>> import accelkit
        >>> plan = accelkit.plan_for("H100 SXM")                  # one GPU, no launcher
        >>> why_alone(plan, world(), distributed=True, chatty=True) is None
        True
    """
    if group is not None or not distributed:
        return None
    backend = plan.get(Key.TORCH_PROCESS_GROUP)
    launched = environment.world_size()
    if backend is not None and backend.status is Status.FAILED:
        why = backend.detail
    elif launched > 1:
        why = (
            f"WORLD_SIZE={launched} but no process group is initialised (the plan's "
            f"process group: {backend.status.value if backend else 'not planned'}); "
            "call accelkit.auto_configure() without ACCELKIT_DISABLE or dry_run, or "
            "torch.distributed.init_process_group(), before fit"
        )
    else:
        why = None
    if why:
        why = f"trained this process alone, without DistributedDataParallel: {why}"
        warn(why)
        return why
    hint = launch_hint(plan)
    if hint and chatty:
        warn(hint)
    return None


def launch_hint(plan: Any) -> str | None:
    """The planner's advice to relaunch under torchrun (several GPUs, one process)."""
    setting = plan.get(Key.LAUNCH) if plan is not None else None
    if setting is None:
        return None
    return f"{setting.reason}: {setting.value}"


def warn(message: str) -> None:
    """Say `message` as a warning of the accelkit logger, from every rank."""
    _log.warning("accelkit: %s", message)
