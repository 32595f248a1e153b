"""`plan(hardware, request) -> Plan`: every decision, no side effects; and
`with_model_size(plan, model)`: a plan made without the model's size, completed with it.

No framework is imported here, so a plan for any GPU generation and topology can be
made and tested on a machine without a GPU.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from accelkit.hardware import framework_builds
from accelkit.hardware.info import HardwareInfo
from accelkit.planning import distribution, precision, runtime, sharding
from accelkit.planning.keys import Key
from accelkit.planning.types import (
    Distribution,
    Framework,
    MemoryEstimate,
    Plan,
    Precision,
    Request,
    Setting,
)

# Settings that lay the model out: a plan holding one of them has chosen its layout.
_LAYOUT_KEYS = frozenset({Key.SHARDING, Key.ACTIVATION_CHECKPOINTING, Key.CPU_OFFLOAD, Key.MEMORY})


def plan(hardware: HardwareInfo, request: Request | None = None) -> Plan:
    """Decide the settings for `request.framework` on `hardware`.

    Args:
        hardware: a snapshot (`accelkit.detect()`, `what_if(...)` or `HardwareInfo.from_dict`).
        request: what the caller asks for; defaults to PyTorch with everything on auto.
            With ``params`` (the model's size) the plan carries ``plan.memory`` and
            chooses DDP, FSDP2, activation checkpointing or CPU offload from it
            (`accelkit.planning.sharding`).

    Returns:
        An immutable `Plan` whose settings each carry a one-line reason. When the
        installed framework was built without CUDA (``hardware.frameworks``), the plan
        is for the machine as it sees it, without GPUs (``plan.hardware.gpus_unusable``
        and a note say why, with the fix), and ``precision="auto"`` is fp32.

    Raises:
        ValueError: the request cannot run on this hardware (e.g. bf16 on a T4),
            with the numbers in the message.

    Example:
        >>> from accelkit import what_if
        >>> plan(what_if("Tesla T4"), Request(framework="torch")).precision.value
        'fp16'
    """
    request = request or Request()
    # The machine as the framework can use it: a build without CUDA sees no GPU.
    hardware = framework_builds.usable_by(hardware, request.framework.value)
    if hardware.gpus_unusable and request.precision is Precision.AUTO:
        chosen, reason = Precision.FP32, f"fp32: {hardware.gpus_unusable}"
    else:
        chosen, reason = precision.choose(hardware, request)
    memory, memory_settings = sharding.choose(hardware, request, chosen)
    engine, distribution_settings = distribution.choose(
        hardware, request, _sharded(request, memory)
    )
    settings = [
        *precision.settings(hardware, request, chosen, reason),
        *runtime.settings(hardware, request, chosen),
        *distribution_settings,
        *memory_settings,
    ]
    return Plan(
        framework=request.framework,
        precision=chosen,
        distribution=engine,
        settings=tuple(settings),
        hardware=hardware,
        notes=hardware.notes,
        memory=memory,
        requested_distribution=request.distribute,
    )


def _sharded(request: Request, memory: MemoryEstimate | None) -> bool:
    """PyTorch shards the model's state (FSDP2) in place of DDP: asked for, or the memory
    estimate's choice."""
    return request.distribute is Distribution.FSDP or (
        memory is not None and memory.choice.startswith("fsdp2")
    )


def lacks_model_size(plan: Plan) -> bool:
    """Whether `with_model_size` would lay out the model of `plan`: a PyTorch plan for
    GPUs made without the model's size (no ``plan.memory``) that has not chosen a layout
    otherwise (FSDP asked for, or a sharding setting written by hand).

    Example:
        >>> from accelkit import what_if
        >>> lacks_model_size(plan(what_if("H100", 2))), lacks_model_size(plan(what_if(None)))
        (True, False)
    """
    return (
        plan.memory is None
        and plan.framework is Framework.TORCH
        and bool(plan.hardware.gpus)
        and Distribution.parse(plan.distribution) is not Distribution.FSDP
        and not any(setting.key in _LAYOUT_KEYS for setting in plan.settings)
    )


def with_model_size(plan: Plan, model: Request) -> Plan:
    """`plan` completed with the layout of a model it was made without: what `plan` would
    have chosen had its request given the model's size. Memory decides the parallelism,
    so a model whose replica does not fit each GPU is sharded (FSDP2) where the plan
    without its size would have trained it with DDP.

    The plan's request stands: its framework, its chosen precision (the bytes per
    parameter) and its ``distribute``: ``"ddp"`` asked for stays DDP (the estimate says
    "does not fit" with the numbers where a replica does not), ``"none"`` keeps one GPU's
    layouts (a whole replica, or FSDP2 with CPU offload in a process of its own), as
    `plan` with ``params`` does. Settings the engine shares keep what happened when the
    plan was applied; DDP's own (its bucket views) go when FSDP2 takes its place.

    Args:
        plan: a plan from `plan` or `accelkit.auto_configure` (any other is returned as
            it is: see `lacks_model_size`).
        model: the model's size: ``params``, ``trainable_params``, ``optimizer``,
            ``frozen_dtype`` and ``activation_bytes`` (unknown: None) are read, the
            rest comes from `plan`. Without ``params``, `plan` is returned as it is.

    Returns:
        `plan` itself when `lacks_model_size` is False; else a copy with ``memory``, the
        memory settings (``sharding``, ``activation_checkpointing``, ``fsdp.cpu_offload``,
        or ``memory``: the refusal) and, where the choice shards, ``Distribution.FSDP``
        and the distribution settings that go with it.

    Example:
        >>> from accelkit import what_if
        >>> eight = plan(what_if("H100", 8))
        >>> sized = with_model_size(eight, Request(params=8e9))
        >>> eight.distribution.value, sized.distribution.value, sized.memory.choice
        ('ddp', 'fsdp', 'fsdp2')
    """
    if model.params is None or not lacks_model_size(plan):
        return plan
    request = dataclasses.replace(
        model, framework=plan.framework, distribute=plan.requested_distribution
    )
    memory, memory_settings = sharding.choose(plan.hardware, request, plan.precision)
    engine, settings = plan.distribution, plan.settings
    if _sharded(request, memory):
        _, replicated = distribution.choose(plan.hardware, request, sharded=False)
        engine, fresh = distribution.choose(plan.hardware, request, sharded=True)
        settings = _replaced(plan.settings, replicated, fresh)
    return dataclasses.replace(
        plan, distribution=engine, settings=(*settings, *memory_settings), memory=memory
    )


def _replaced(
    settings: Sequence[Setting], stale: Iterable[Setting], fresh: Sequence[Setting]
) -> tuple[Setting, ...]:
    """`settings` with those of the keys in `stale` replaced by `fresh`, in the place of
    the first one; a fresh setting of the same key and value as the one it replaces
    keeps what happened to it (applied, kept user value...)."""
    keys = {setting.key for setting in (*stale, *fresh)}
    old = {setting.key: setting for setting in settings if setting.key in keys}
    new = [
        dataclasses.replace(setting, status=was.status, detail=was.detail)
        if (was := old.get(setting.key)) is not None and was.value == setting.value
        else setting
        for setting in fresh
    ]
    at = next((i for i, setting in enumerate(settings) if setting.key in keys), len(settings))
    kept = [setting for setting in settings if setting.key not in keys]
    return (*kept[:at], *new, *kept[at:])
