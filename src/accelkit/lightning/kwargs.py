"""`trainer_kwargs(plan)`: a plan's decisions as `lightning.Trainer` arguments.

Under an FSDP2 plan the strategy is Lightning's ``FSDPStrategy``, not its
``ModelParallelStrategy``: FSDPStrategy carries the whole plan in the Trainer's
arguments (the blocks to wrap, the blocks to checkpoint, CPU offload, bf16 parameters
with float32 reduction), while ModelParallelStrategy (FSDP2's ``fully_shard``) applies
nothing itself: the LightningModule's ``configure_model`` must shard. FSDPStrategy is
FSDP1 (``FullyShardedDataParallel``): the same full sharding of the state, one unit per
block, with flat parameters.

Not on the CPU: Lightning refuses ``FSDPStrategy`` without a CUDA accelerator
(``lightning/pytorch/trainer/connectors/accelerator_connector.py``,
``_check_strategy_and_fallback``: "requires a GPU accelerator"), and past that FSDP1 itself
refuses a CPU module given no ``device_id`` (``torch/distributed/fsdp/_init_utils.py``,
``_init_device_handle``: "FSDP needs a non-CPU accelerator device"; Lightning passes the
CPU's index, None). A CPU plan that shards gets ``"ddp"`` and a warning saying so.
"""

from __future__ import annotations

from typing import Any

from accelkit.planning import Distribution, Plan, Precision, sharding
from accelkit.planning.keys import Key
from accelkit.utils.log import logger

# Why a CPU plan that shards gets DDP (the module docstring has where Lightning and FSDP1 refuse).
CPU_NOT_SHARDED = (
    "Lightning cannot shard on the CPU (its FSDPStrategy requires a GPU accelerator, and "
    "FSDP1 a non-CPU device): trainer_kwargs gives strategy='ddp', every rank holding the "
    "whole model; accelkit.torch.fit shards with FSDP2 on the CPU"
)

# Lightning's precision names (lightning.fabric.connector._PRECISION_INPUT). TF32 keeps
# fp32 tensors: the plan's TF32 flags are applied by `accelkit.apply`, not by Lightning.
_PRECISION = {
    Precision.BF16: "bf16-mixed",
    Precision.FP16: "16-mixed",
    Precision.TF32: "32-true",
    Precision.FP32: "32-true",
}


def trainer_kwargs(plan: Plan, model: Any = None) -> dict[str, Any]:
    """`precision`, `accelerator`, `devices` and `strategy` for `lightning.Trainer`.

    Args:
        plan: a plan, e.g. from `accelkit.auto_configure()` or, for hardware you don't
            have, `accelkit.plan_for("A100-SXM4-80GB")`.
        model: the LightningModule. A plan made without a model size
            (`accelkit.auto_configure()` takes none) is first laid out for it, as
            `accelkit.torch.fit` lays out its own (`accelkit.planning.with_model_size`;
            the optimizer, built later by ``configure_optimizers``, counted as AdamW):
            under torchrun a model whose replica does not fit one GPU is then sharded,
            where the plan alone would give it DDP and an out-of-memory first step.
            Needed when the plan shards (FSDP2), for its blocks
            (`accelkit.torch.distributed.sharding.find_blocks`).

    Returns:
        ``precision``: "bf16-mixed", "16-mixed" or "32-true" from `plan.precision`;
        ``accelerator``: "gpu" when the plan is for NVIDIA GPUs, else "cpu";
        ``devices``: the processes of this node when the plan distributes (torchrun's
        ``LOCAL_WORLD_SIZE``, else every GPU), else 1;
        ``strategy``: "ddp" when the plan distributes (`Distribution.DDP`); when it shards
        (`Distribution.FSDP`), an ``FSDPStrategy`` that wraps each of the model's blocks,
        checkpoints them when the plan's ``activation_checkpointing`` is True, offloads
        to the CPU when its ``fsdp.cpu_offload`` is, and gathers 16-bit parameters with
        float32 gradient reduction under a mixed plan (a CPU plan that shards: "ddp",
        with a warning: Lightning shards only on GPUs); else "auto".
        A plan that did not distribute several GPUs (no launcher) says in its
        ``launch`` setting how to start the run so that it does.

    Raises:
        ValueError: the plan's precision is not decided, or the plan shards and no
            `model` was given.
        TypeError: `model` is given and is not a module.

    Example:
        >>> import accelkit
        >>> trainer_kwargs(accelkit.plan_for("Tesla T4"))
        {'precision': '16-mixed', 'accelerator': 'gpu', 'devices': 1, 'strategy': 'auto'}
    """
    if model is not None:
        from accelkit.torch.training.model_size import trainer_plan

        plan = trainer_plan(plan, model, "accelkit.lightning.trainer_kwargs")
    # Under fp8 the trainer autocasts to bf16; the float8 layers are tune's lever.
    precision = Precision.parse(plan.precision).without_float8
    if precision not in _PRECISION:
        raise ValueError(
            f"plan.precision={precision.value!r} is not decided yet; "
            f"give a plan from accelkit.plan_for() or auto_configure()"
        )
    gpu = plan.device_type == "cuda"
    distribution = Distribution.parse(plan.distribution)
    devices = 1
    if distribution in (Distribution.DDP, Distribution.FSDP):
        devices = plan.hardware.launcher.local_world_size or max(1, plan.hardware.gpu_count)
    strategy: Any = "ddp" if distribution is Distribution.DDP else "auto"
    if distribution is Distribution.FSDP and not gpu:
        logger.warning("%s", CPU_NOT_SHARDED)
        strategy = "ddp"
    elif distribution is Distribution.FSDP:
        strategy = _fsdp_strategy(plan, precision, model)
    elif why := sharding.alone_sharded(plan, "trainer_kwargs"):
        logger.warning("%s", why)
    return {
        "precision": _PRECISION[precision],
        "accelerator": "gpu" if gpu else "cpu",
        "devices": devices,
        "strategy": strategy,
    }


def _fsdp_strategy(plan: Plan, precision: Precision, model: Any) -> Any:
    """Lightning's ``FSDPStrategy`` for an FSDP2 plan (see the module docstring)."""
    if model is None:
        raise ValueError(
            "trainer_kwargs(plan): the plan shards the model with FSDP2; pass "
            "trainer_kwargs(plan, model=your_lightning_module) so that its blocks are "
            "wrapped (and checkpointed) one unit each"
        )
    from accelkit.lightning._framework import lightning_pytorch
    from accelkit.torch.distributed.sharding import find_blocks
    from accelkit.utils.imports import require

    torch = require("torch")
    blocks = {type(block) for _, block in find_blocks(model)}
    dtype = {Precision.BF16: torch.bfloat16, Precision.FP16: torch.float16}.get(precision)
    fsdp = require("torch.distributed.fsdp")
    mixed = (
        None
        if dtype is None
        else fsdp.MixedPrecision(param_dtype=dtype, reduce_dtype=torch.float32)
    )
    checkpointing = bool(plan.value(Key.ACTIVATION_CHECKPOINTING, False)) and bool(blocks)
    return lightning_pytorch().strategies.FSDPStrategy(
        auto_wrap_policy=blocks or None,
        activation_checkpointing_policy=blocks if checkpointing else None,
        cpu_offload=bool(plan.value(Key.CPU_OFFLOAD, False)),
        mixed_precision=mixed,
        sharding_strategy="FULL_SHARD",
    )
