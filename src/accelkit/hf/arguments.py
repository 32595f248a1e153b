"""`training_arguments(plan)`: the `transformers.TrainingArguments` fields a plan implies."""

from __future__ import annotations

import importlib.metadata
from typing import Any

from accelkit.planning import Plan, sharding
from accelkit.planning.keys import Key
from accelkit.planning.types import Distribution, Precision
from accelkit.utils.log import logger

# Why a CPU plan gets no `fsdp` fields. Accelerate turns an FSDP plugin into
# DistributedType.FSDP only for accelerator process groups (AcceleratorState.__init__,
# accelerate/state.py: MULTI_GPU, MULTI_XPU...); a gloo group on the CPU stays MULTI_CPU
# and the Trainer wraps the model in DDP instead, saying nothing (tests/hf/test_fsdp_launch.py).
CPU_NOT_SHARDED = (
    "the Hugging Face Trainer cannot shard on the CPU (Accelerate shards only on GPUs and "
    "other accelerators): training_arguments gives no fsdp fields, and the Trainer trains "
    "data-parallel, every rank holding the whole model; accelkit.torch.fit shards with "
    "FSDP2 on the CPU"
)


def training_arguments(plan: Plan, model: Any = None) -> dict[str, Any]:
    """The `TrainingArguments` fields that carry out `plan` in a Hugging Face `Trainer`.

    Given the `model`, a plan made without a model size (`accelkit.auto_configure()`
    takes none) is first laid out for it, as `accelkit.torch.fit` lays out its own
    (`accelkit.planning.with_model_size`, the Trainer's AdamW counted): under torchrun, a
    model whose replica does not fit one GPU then gets the ``fsdp`` fields, where the
    plan alone would leave the Trainer to train it data-parallel and run out of memory
    at the first step. Without `model`, the plan is followed as it is.

    - ``bf16`` / ``fp16``: the plan's mixed precision (the Trainer autocasts, and scales
      the fp16 loss); both False on an fp32, tf32 or CPU plan;
    - ``tf32``: True where the plan turns TF32 matmuls on, else None (left as it is);
    - ``torch_compile``: the plan's compile choice;
    - ``dataloader_pin_memory``: page-locked batches only help host-to-GPU copies, so
      True on a GPU plan and False on a CPU one;
    - ``fsdp`` and ``fsdp_config``, only when the plan shards (`Distribution.FSDP`): full
      sharding with FSDP2 (``"version": 2``), one unit per transformer block (Transformers
      wraps the classes the model names in ``_no_split_modules``), the blocks checkpointed
      when the plan's ``activation_checkpointing`` is True (FSDP's own checkpointing,
      which Transformers prefers to ``gradient_checkpointing``) and the shards offloaded
      to the CPU when its ``fsdp.cpu_offload`` is. Transformers 5 takes ``fsdp=True``;
      4.x takes ``"full_shard auto_wrap"`` (``offload`` added); a 4.x release that
      predates ``fsdp_config["version"]`` applies the same settings with FSDP1.
      Not on a CPU plan: Accelerate shards only on GPUs (and other accelerators), and
      the Trainer given ``fsdp`` on the CPU would train data-parallel without a word;
      the fields are left out and a warning says so.

    The loader's worker count is not in a plan: the advisor suggests one from the
    input wait it measured (`report.advice`).

    Raises:
        TypeError: `model` is given and is not a module.

    Example:
        >>> import accelkit
        >>> a100 = accelkit.plan_for("A100-SXM4-80GB")
        >>> training_arguments(a100)  # doctest: +NORMALIZE_WHITESPACE
        {'bf16': True, 'fp16': False, 'tf32': True, 'torch_compile': False,
         'dataloader_pin_memory': True}
        >>> from transformers import TrainingArguments
        >>> plan = accelkit.auto_configure(verbose=False)       # this machine's plan
        >>> args = TrainingArguments(**training_arguments(plan), output_dir="out")
    """
    if model is not None:
        from accelkit.torch.training.model_size import trainer_plan

        plan = trainer_plan(plan, model, "accelkit.hf.training_arguments")
    gpu = plan.device_type == "cuda"
    arguments = {
        "bf16": gpu and plan.precision.without_float8 is Precision.BF16,
        "fp16": gpu and plan.precision is Precision.FP16,
        "tf32": True if gpu and plan.value(Key.TORCH_TF32_MATMUL) is True else None,
        "torch_compile": plan.compile,
        "dataloader_pin_memory": gpu,
    }
    if Distribution.parse(plan.distribution) is Distribution.FSDP:
        if gpu:
            arguments.update(_fsdp(plan))
        else:
            logger.warning("accelkit: %s", CPU_NOT_SHARDED)
    elif why := sharding.alone_sharded(plan, "training_arguments"):
        logger.warning("accelkit: %s", why)
    return arguments


def _fsdp(plan: Plan) -> dict[str, Any]:
    """The ``fsdp`` and ``fsdp_config`` fields of an FSDP2 plan, for the installed
    Transformers (see `training_arguments`)."""
    offload = bool(plan.value(Key.CPU_OFFLOAD, False))
    config: dict[str, Any] = {
        "version": 2,
        "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "reshard_after_forward": True,
        "activation_checkpointing": bool(plan.value(Key.ACTIVATION_CHECKPOINTING, False)),
        "cpu_offload": offload,
    }
    if _transformers_major() >= 5:
        return {"fsdp": True, "fsdp_config": config}
    return {"fsdp": "full_shard auto_wrap" + (" offload" if offload else ""), "fsdp_config": config}


def _transformers_major() -> int:
    """The installed Transformers' major version (5 when it cannot be read: the newest)."""
    try:
        return int(importlib.metadata.version("transformers").split(".")[0])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return 5
