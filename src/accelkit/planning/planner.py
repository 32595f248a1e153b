"""`plan(hardware, request) -> Plan`: every decision, no side effects.

No framework is imported here, so a plan for any GPU generation and topology
can be made and tested on a machine without a GPU.
"""

from __future__ import annotations

from accelkit.hardware import framework_builds
from accelkit.hardware.info import HardwareInfo
from accelkit.planning import distribution, precision, runtime, sharding
from accelkit.planning.types import Distribution, Plan, Precision, Request


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
    sharded = request.distribute is Distribution.FSDP or (
        memory is not None and memory.choice.startswith("fsdp2")
    )
    engine, distribution_settings = distribution.choose(hardware, request, sharded)
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
    )
