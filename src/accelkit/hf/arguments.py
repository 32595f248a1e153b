"""`training_arguments(plan)`: the `transformers.TrainingArguments` fields a plan implies."""

from __future__ import annotations

from typing import Any

from accelkit.planning import Plan
from accelkit.planning.keys import Key
from accelkit.planning.types import Precision


def training_arguments(plan: Plan) -> dict[str, Any]:
    """The `TrainingArguments` fields that carry out `plan` in a Hugging Face `Trainer`.

    - ``bf16`` / ``fp16``: the plan's mixed precision (the Trainer autocasts, and scales
      the fp16 loss); both False on an fp32, tf32 or CPU plan;
    - ``tf32``: True where the plan turns TF32 matmuls on, else None (left as it is);
    - ``torch_compile``: the plan's compile choice;
    - ``dataloader_pin_memory``: page-locked batches only help host-to-GPU copies, so
      True on a GPU plan and False on a CPU one.

    The loader's worker count is not in a plan: the advisor suggests one from the
    input wait it measured (`report.advice`).

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
    gpu = plan.device_type == "cuda"
    return {
        "bf16": gpu and plan.precision is Precision.BF16,
        "fp16": gpu and plan.precision is Precision.FP16,
        "tf32": True if gpu and plan.value(Key.TORCH_TF32_MATMUL) is True else None,
        "torch_compile": plan.compile,
        "dataloader_pin_memory": gpu,
    }
