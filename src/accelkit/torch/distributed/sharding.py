"""How `accelkit.torch.fit` shards the model with FSDP2 when the plan says so.

The planner chooses FSDP2 when the model's state does not fit each GPU whole
(`accelkit.planning.memory`: ``plan.distribution`` is ``Distribution.FSDP``, the
``sharding`` setting is ``"fsdp2"``); this module applies it, one technique per
function, as torchtitan's ``parallelize.py`` does:

- `find_blocks`: the units to shard and recompute, the model's transformer blocks: the
  classes a Hugging Face model names in ``_no_split_modules``, else the class of the
  repeated children of a ``ModuleList`` / ``nn.Sequential`` that hold the most parameters;
- `apply_activation_checkpointing`: each block's forward recomputed in the backward pass
  (``torch.utils.checkpoint.checkpoint``, non-reentrant), when the plan's
  ``activation_checkpointing`` setting is True;
- `apply_fully_shard`: ``fully_shard`` on each block, then on the root (the embeddings,
  the head and whatever else is left), with the plan's `mixed_precision_policy` and, when
  its ``fsdp.cpu_offload`` setting is True, ``CPUOffloadPolicy``.

Mixed precision: under a bf16 plan the gathered parameters are bf16 and gradients are
reduced in float32 (``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)``:
the sharded state stays float32); under an fp16 plan the same with float16, and the step's
loss scaler is FSDP's ``ShardedGradScaler``, whose inf/NaN check is agreed by every rank
(each holds only its shard of the gradients: a plain GradScaler would let one rank skip a
step the others take); an fp32 or tf32 plan has no policy. The fit's autocast runs inside,
as without sharding, so losses and normalisations stay float32.

``fully_shard`` is public in ``torch.distributed.fsdp`` from PyTorch 2.6 and at
``torch.distributed._composable.fsdp`` before; a PyTorch that has neither is refused
with the version it has.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections import defaultdict
from types import SimpleNamespace
from typing import Any

from accelkit.frameworks.torch_adapter import destroy_at_exit
from accelkit.planning import Plan
from accelkit.planning.keys import Key
from accelkit.planning.types import Distribution, Precision
from accelkit.utils.imports import require

_log = logging.getLogger("accelkit")

FSDP2 = "fsdp2"  # the `sharding` setting's value that asks for it


@dataclasses.dataclass(frozen=True)
class Sharded:
    """What `shard` did to the module, for the report (``report.facts["sharding"]``).

    Attributes:
        blocks: the block class sharded (and recomputed) one unit each, "" when none.
        count: how many blocks.
        where: the name of the first block's container (``transformer.h``).
        param_dtype, reduce_dtype: the mixed-precision policy (None: the parameters').
        checkpointing: whether the blocks recompute their activations.
        offload: whether the shards live in host memory (``CPUOffloadPolicy``).
        by_script: the script sharded the model itself (accelkit applied nothing).
        one_process: accelkit started a process group of this one process for it (no
            launcher: one GPU whose plan offloads the state, or torchrun with one rank).
    """

    blocks: str = ""
    count: int = 0
    where: str = ""
    param_dtype: str | None = None
    reduce_dtype: str | None = None
    checkpointing: bool = False
    offload: bool = False
    by_script: bool = False
    one_process: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"kind": FSDP2, **dataclasses.asdict(self)}

    def change(self) -> str:
        """The in-place change, in words, for ``report.facts["model_changes"]``."""
        if self.by_script:
            return "sharded with FSDP2 by the script: kept as it is"
        units = (
            f"{self.count} x {self.blocks} ({self.where}) and the root"
            if self.count
            else "the root"
        )
        policy = (
            f", params {self.param_dtype}, reduce {self.reduce_dtype}" if self.param_dtype else ""
        )
        extra = "".join(
            (
                ", blocks recomputed in backward" if self.checkpointing else "",
                ", shards offloaded to the CPU" if self.offload else "",
                ", in a process group of this one process" if self.one_process else "",
            )
        )
        return f"sharded in place with FSDP2 (fully_shard): {units}{policy}{extra}"


def wanted(plan: Plan) -> bool:
    """True when `plan` shards with FSDP2 (its distribution or its ``sharding`` setting).

    Example:
        >>> import accelkit
        >>> wanted(accelkit.plan_for("H100 SXM"))
        False
    """
    return (
        Distribution.parse(plan.distribution) is Distribution.FSDP
        or plan.value(Key.SHARDING) == FSDP2
    )


def fsdp_api() -> SimpleNamespace:
    """``fully_shard``, ``MixedPrecisionPolicy``, ``CPUOffloadPolicy``, ``FSDPModule`` and
    ``ShardedGradScaler`` of this PyTorch, or RuntimeError naming its version.

    Example:
        >>> fsdp_api().fully_shard.__name__
        'fully_shard'
    """
    torch = require("torch")
    names = ("fully_shard", "MixedPrecisionPolicy", "CPUOffloadPolicy", "FSDPModule")
    for where in ("torch.distributed.fsdp", "torch.distributed._composable.fsdp"):
        try:
            module = __import__(where, fromlist=list(names))
            found = {name: getattr(module, name) for name in names}
        except (ImportError, AttributeError):
            continue
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        return SimpleNamespace(**found, ShardedGradScaler=ShardedGradScaler)
    raise RuntimeError(
        f"the plan shards the model with FSDP2, but this PyTorch ({torch.__version__}) has no "
        "fully_shard (torch.distributed.fsdp from 2.6, torch.distributed._composable.fsdp "
        "before): install torch>=2.6, or plan with accelkit.auto_configure(distribute=...) "
        "for data parallelism"
    )


def find_blocks(module: Any) -> list[tuple[str, Any]]:
    """The blocks of `module` to shard one unit each, by name, outermost first.

    The classes a Hugging Face model names in ``_no_split_modules`` (``GPT2Block``,
    ``LlamaDecoderLayer``: the units Transformers' own FSDP wrapping uses) when the model
    has them; else the children of one class of a ``ModuleList`` or an ``nn.Sequential``,
    at least two, that hold the most parameters (a transformer's layers).
    A block inside another is left to the outer one; none found: an empty list (the
    root is then the one unit).

    Example:
        >>> import torch
        >>> layers = [torch.nn.Linear(8, 8) for _ in range(3)]
        >>> model = torch.nn.Sequential(*layers, torch.nn.ReLU())
        >>> [name for name, _ in find_blocks(model)]
        ['0', '1', '2']
    """
    torch = require("torch")
    named = set(getattr(module, "_no_split_modules", None) or ())
    found = [(n, m) for n, m in module.named_modules() if n and type(m).__name__ in named]
    if not found:
        containers = (torch.nn.ModuleList, torch.nn.Sequential)
        groups: dict[tuple[str, type], list[tuple[str, Any]]] = defaultdict(list)
        for name, container in module.named_modules():
            if isinstance(container, containers):
                for child, block in container.named_children():
                    key = (name, type(block))
                    groups[key].append((f"{name}.{child}" if name else child, block))
        sizes = {
            key: sum(p.numel() for _, block in blocks for p in block.parameters())
            for key, blocks in groups.items()
            if len(blocks) >= 2
        }
        sizes = {key: size for key, size in sizes.items() if size > 0}
        found = groups[max(sizes, key=sizes.__getitem__)] if sizes else []
    return _outermost(found)


def _outermost(blocks: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    kept: list[tuple[str, Any]] = []
    for name, block in sorted(blocks, key=lambda item: item[0].count(".")):
        if not any(name.startswith(outer + ".") for outer, _ in kept):
            kept.append((name, block))
    order = {name: i for i, (name, _) in enumerate(blocks)}
    return sorted(kept, key=lambda item: order[item[0]])


def apply_activation_checkpointing(blocks: list[tuple[str, Any]]) -> None:
    """Recompute each block's activations in the backward pass instead of keeping them:
    its forward runs under non-reentrant ``torch.utils.checkpoint.checkpoint`` (public
    since PyTorch 1.11; it restores the autocast state and the RNG for the recomputation).

    The block keeps its class, name and state dict: its instance's ``forward`` is the
    checkpointed one. Under FSDP2 the block's unit hooks run around it, so its parameters
    are gathered again for the recomputation, as with torchtitan's checkpoint wrapper.

    Example:
        >>> import torch
        >>> model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
        >>> apply_activation_checkpointing(find_blocks(model))
        >>> model(torch.randn(2, 4, requires_grad=True)).sum().backward()
    """
    checkpoint = require("torch").utils.checkpoint.checkpoint
    for _, block in blocks:
        if not isinstance(block.__dict__.get("forward"), functools.partial):  # not twice
            block.forward = functools.partial(_checkpointed, checkpoint, block.forward)


def _checkpointed(checkpoint: Any, forward: Any, *args: Any, **kwargs: Any) -> Any:
    return checkpoint(forward, *args, use_reentrant=False, **kwargs)


def mixed_precision_policy(api: SimpleNamespace, plan: Plan) -> Any:
    """FSDP2's policy under `plan`: the plan's 16-bit dtype for the gathered parameters
    and float32 for the gradient reduction; fp32 and tf32 plans: the parameters' dtype.

    Example:
        >>> import accelkit
        >>> policy = mixed_precision_policy(fsdp_api(), accelkit.plan_for("H100 SXM"))
        >>> policy.param_dtype, policy.reduce_dtype
        (torch.bfloat16, torch.float32)
    """
    torch = require("torch")
    dtype = {Precision.BF16: torch.bfloat16, Precision.FP16: torch.float16}.get(
        Precision.parse(plan.precision).without_float8
    )
    if dtype is None:
        return api.MixedPrecisionPolicy()
    return api.MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)


def apply_fully_shard(
    module: Any,
    blocks: list[tuple[str, Any]],
    api: SimpleNamespace,
    *,
    mesh: Any,
    policy: Any,
    offload: bool,
) -> None:
    """``fully_shard`` each block, then the root: each block is one unit, gathered for
    its forward and backward and freed after, so one GPU holds its shard of the whole
    state and one block's parameters at a time (the PyTorch FSDP2 tutorial's layout)."""
    options: dict[str, Any] = {"mesh": mesh, "mp_policy": policy}
    if offload:
        options["offload_policy"] = api.CPUOffloadPolicy()
    for _, block in blocks:
        api.fully_shard(block, **options)
    api.fully_shard(module, **options)


def shard(module: Any, plan: Plan, device: Any, optimizer: Any = None) -> Sharded:
    """Shard `module` in place over the process group as `plan` says (see the module
    docstring); returns what was done. Every rank calls it with the same model.

    Args:
        module: the model, on `device` (a module the script sharded itself is kept).
        plan: the plan in force (its precision, ``activation_checkpointing`` and
            ``fsdp.cpu_offload`` settings).
        device: this rank's device: the mesh's device type (``cuda``: the current device
            is set to it, where FSDP2 allocates its buffers).
        optimizer: the script's optimizer, built on the module's parameters: it is given
            the sharded ones in their place (`follow_parameters`).

    Raises:
        RuntimeError: this PyTorch has no ``fully_shard`` (`fsdp_api`).
        ValueError: the optimizer has state already (`follow_parameters`).
    """
    torch = require("torch")
    api = fsdp_api()
    if isinstance(module, api.FSDPModule):
        return Sharded(by_script=True)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    started = one_process_group(device)
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(device.type, (torch.distributed.get_world_size(),))
    blocks = find_blocks(module)
    kind = type(blocks[0][1]).__name__ if blocks else ""  # fully_shard renames the class
    before = dict(module.named_parameters())
    if optimizer is not None:
        check_optimizer_state(optimizer)
    checkpointing = bool(plan.value(Key.ACTIVATION_CHECKPOINTING, False)) and bool(blocks)
    offload = bool(plan.value(Key.CPU_OFFLOAD, False)) and device.type == "cuda"
    if checkpointing:
        apply_activation_checkpointing(blocks)
    policy = mixed_precision_policy(api, plan)
    apply_fully_shard(module, blocks, api, mesh=mesh, policy=policy, offload=offload)
    if optimizer is not None:
        follow_parameters(optimizer, before, dict(module.named_parameters()))
    done = Sharded(
        blocks=kind,
        count=len(blocks),
        where=_container(blocks[0][0]) if blocks else "",
        param_dtype=_name(policy.param_dtype),
        reduce_dtype=_name(policy.reduce_dtype),
        checkpointing=checkpointing,
        offload=offload,
        one_process=started,
    )
    _log.debug("accelkit.torch.fit: %s", done.change())
    return done


def one_process_group(device: Any) -> bool:
    """Start a process group of this one process (rank 0 of 1, an in-memory store; NCCL on
    a GPU, gloo on the CPU) when none is initialised, as FSDP2 needs one; True if started.
    It stays initialised after the fit: the sharded model's parameters live on it.

    Example:
        >>> import torch
        >>> started = one_process_group(torch.device("cpu"))
        >>> torch.distributed.get_world_size()
        1
        >>> torch.distributed.destroy_process_group()
    """
    dist = require("torch").distributed
    if dist.is_initialized():
        return False
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    destroy_at_exit(dist)  # as auto_configure's
    return True


def described(module: Any) -> Sharded | None:
    """What FSDP2 did to `module` when something else sharded it (a trainer, the script),
    as `shard` records it, ``by_script`` True (accelkit applied nothing); None when
    `module` is not an FSDP2 root (or this PyTorch has no FSDP2).

    The units are the FSDP2 modules under the root (named by their own class:
    ``fully_shard`` makes ``FSDPGPT2Block`` of ``GPT2Block``); checkpointing is a
    ``CheckpointWrapper`` around them (Accelerate's), this module's own, or Transformers'
    gradient (activation) checkpointing; offload, local shards in host memory on a GPU run.
    FSDP2 has no public getter of its policy: it is read from the root's state, and
    left None when that is not found.

    Example:
        >>> import torch
        >>> described(torch.nn.Linear(2, 2)) is None
        True
    """
    try:
        api = fsdp_api()
    except RuntimeError:
        return None
    if not isinstance(module, api.FSDPModule):
        return None
    units = [(n, m) for n, m in module.named_modules() if n and isinstance(m, api.FSDPModule)]
    state = module._get_fsdp_state()  # private: FSDP2 has no public one
    policy = getattr(state, "_mp_policy", None)
    device = getattr(state, "_device", None)
    on_gpu = device is not None and device.type != "cpu"
    blocks = _most_common_units(units, api)
    return Sharded(
        blocks=_unsharded_class(blocks[0][1], api) if blocks else "",
        count=len(blocks),
        where=_container(blocks[0][0].replace("._checkpoint_wrapped_module", "")) if blocks else "",
        param_dtype=_name(getattr(policy, "param_dtype", None)),
        reduce_dtype=_name(getattr(policy, "reduce_dtype", None)),
        checkpointing=_checkpointed_blocks(module),
        offload=on_gpu and any(_local(p).device.type == "cpu" for p in module.parameters()),
        by_script=True,
    )


FSDP1 = "fsdp1"  # the kind of `described_fsdp1`'s record


def described_fsdp1(module: Any) -> dict[str, Any] | None:
    """The ``facts["sharding"]`` record of FSDP1 (``FullyShardedDataParallel``) units in
    `module` or around it, as `described` gives FSDP2's, with ``kind`` "fsdp1" and FSDP1's
    ``sharding_strategy`` ("FULL_SHARD"...); None when `module` has no FSDP1 unit.

    FSDP1 is not FSDP2: its units hold flat parameters (``FlatParameter``, one per unit)
    where FSDP2's hold a DTensor each, so `described` (FSDP2 only) leaves it alone. Lightning's
    ``FSDPStrategy`` (what `accelkit.lightning.trainer_kwargs` gives an FSDP plan) makes
    FSDP1: a root around the LightningModule, a unit per block its wrap policy names. The
    blocks are the class most units wrap; policy, offload and strategy are read from the
    first unit's state (Lightning gives every unit the same).

    Example:
        >>> import torch
        >>> described_fsdp1(torch.nn.Linear(2, 2)) is None
        True
    """
    fsdp = require("torch.distributed.fsdp")
    units = [
        (n, m) for n, m in module.named_modules() if isinstance(m, fsdp.FullyShardedDataParallel)
    ]
    if not units:
        return None
    inner = [(n, m) for n, m in units if n] or units  # the root alone: itself the unit
    by_class: dict[str, list[str]] = defaultdict(list)
    for name, unit in inner:
        by_class[type(unit.module).__name__].append(name)
    blocks, names = max(by_class.items(), key=lambda item: len(item[1]))
    first = units[0][1]
    policy = first.mixed_precision  # FSDP1 state: a MixedPrecision, fields None when off
    wrappers = ("_fsdp_wrapped_module", "_checkpoint_wrapped_module")
    where = ".".join(part for part in names[0].split(".") if part not in wrappers)
    record = Sharded(
        blocks=blocks,
        count=len(names),
        where=_container(where) if where else "",
        param_dtype=_name(policy.param_dtype),
        reduce_dtype=_name(policy.reduce_dtype),
        checkpointing=_checkpointed_blocks(module),
        offload=bool(first.cpu_offload.offload_params),
        by_script=True,
    )
    return {**record.to_dict(), "kind": FSDP1, "sharding_strategy": first.sharding_strategy.name}


def is_fsdp1_root(module: Any) -> bool:
    """Whether `module` is an FSDP1 unit wrapping the rest (Lightning's ``FSDPStrategy``
    wraps the LightningModule so). Its nested units run only from its forward: a pass
    that enters below it (``training_step`` called on the module inside) makes the first
    nested unit take itself for the root, and FSDP1 then fails the next step through
    the real root ("Non-root FSDP instance's `_is_root` should not have been set yet").

    Example:
        >>> import torch
        >>> is_fsdp1_root(torch.nn.Linear(2, 2))
        False
    """
    fsdp = require("torch.distributed.fsdp")
    return isinstance(module, fsdp.FullyShardedDataParallel)


def gathers_in_forward(module: Any) -> bool:
    """Whether a forward of `module` runs collectives because its parameters are
    sharded (FSDP2's DTensors, FSDP1's units, DeepSpeed ZeRO-3's partitions): a pass on
    one rank alone, such as a FLOP count of a shape only that rank saw, would wait for
    the other ranks forever.

    Example:
        >>> import torch
        >>> gathers_in_forward(torch.nn.Linear(2, 2))
        False
    """
    if any(type(m).__name__ == "FullyShardedDataParallel" for m in module.modules()):
        return True
    return any(
        hasattr(p, "ds_id") or type(p).__name__ in ("DTensor", "FlatParameter")
        for p in module.parameters()
    )


def _local(parameter: Any) -> Any:
    """This rank's shard of a DTensor parameter (a plain tensor: itself)."""
    to_local = getattr(parameter, "to_local", None)
    return parameter if to_local is None else to_local()


def _most_common_units(units: list[tuple[str, Any]], api: SimpleNamespace) -> list[tuple[str, Any]]:
    """The units of the class most units have: the blocks, where a wrap policy also made
    units of other modules (Accelerate's transformer-based policy: the embeddings too)."""
    by_class: dict[str, list[tuple[str, Any]]] = defaultdict(list)
    for name, unit in units:
        by_class[_unsharded_class(unit, api)].append((name, unit))
    return max(by_class.values(), key=len, default=[])


def _unsharded_class(unit: Any, api: SimpleNamespace) -> str:
    return next(c for c in type(unit).__mro__ if not issubclass(c, api.FSDPModule)).__name__


def _checkpointed_blocks(module: Any) -> bool:
    # Transformers 5 renamed is_gradient_checkpointing (deprecated) to is_activation_...
    names = ("is_activation_checkpointing", "is_gradient_checkpointing")
    name = next((n for n in names if hasattr(type(module), n)), None)
    return bool(name and getattr(module, name)) or any(
        type(m).__name__ == "CheckpointWrapper"
        or isinstance(m.__dict__.get("forward"), functools.partial)
        for m in module.modules()
    )


def check_optimizer_state(optimizer: Any) -> None:
    """ValueError when `optimizer` has state already (it stepped before the fit): that
    state is of the whole parameters, and FSDP2 trains shards of them.

    Example:
        >>> import torch
        >>> check_optimizer_state(torch.optim.AdamW(torch.nn.Linear(2, 2).parameters()))
    """
    if any(optimizer.state.values()):
        raise ValueError(
            f"the plan shards the model with FSDP2, but the {type(optimizer).__name__} given "
            "to the fit has stepped already: its state is of whole parameters, FSDP2 trains "
            "shards; give the fit a new optimizer (its state then starts sharded), or "
            "load a sharded state after the fit with torch.distributed.checkpoint"
        )


def follow_parameters(optimizer: Any, before: dict[str, Any], after: dict[str, Any]) -> None:
    """Point `optimizer`'s parameter groups at the sharded parameters: ``fully_shard``
    registers new (DTensor) parameters under the same names, so an optimizer built before
    it would step the old ones, which no longer get gradients. The object stays the same
    (a learning-rate scheduler bound to it keeps working); a parameter outside the model
    stays as it was.

    Example:
        >>> import torch
        >>> model = torch.nn.Linear(2, 2)
        >>> optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        >>> before = dict(model.named_parameters())
        >>> model.weight = torch.nn.Parameter(model.weight.detach().clone())  # as fully_shard does
        >>> follow_parameters(optimizer, before, dict(model.named_parameters()))
        >>> optimizer.param_groups[0]["params"][0] is model.weight
        True
    """
    new = {id(param): after[name] for name, param in before.items() if name in after}
    for group in optimizer.param_groups:
        group["params"] = [new.get(id(param), param) for param in group["params"]]


def grad_scaler(scaler: Any) -> Any:
    """The step's loss scaler under FSDP2: a ``ShardedGradScaler`` with `scaler`'s settings
    when `scaler` scales (an fp16 plan on CUDA), so every rank skips the same steps;
    `scaler` itself when it passes calls through.

    Example:
        >>> import torch
        >>> off = torch.amp.GradScaler("cpu", enabled=False)
        >>> grad_scaler(off) is off
        True
    """
    if not scaler.is_enabled():
        return scaler
    sharded = fsdp_api().ShardedGradScaler(device="cuda")
    sharded.load_state_dict(scaler.state_dict())
    return sharded


def _container(name: str) -> str:
    return name.rsplit(".", 1)[0] if "." in name else "the root's children"


def _name(dtype: Any) -> str | None:
    return None if dtype is None else str(dtype).removeprefix("torch.")
