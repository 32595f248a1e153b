"""`trainer_kwargs(plan)`: a plan's decisions as `lightning.Trainer` arguments."""

from __future__ import annotations

from typing import Any

from accelkit.planning import Distribution, Plan, Precision

# Lightning's precision names (lightning.fabric.connector._PRECISION_INPUT). TF32 keeps
# fp32 tensors: the plan's TF32 flags are applied by `accelkit.apply`, not by Lightning.
_PRECISION = {
    Precision.BF16: "bf16-mixed",
    Precision.FP16: "16-mixed",
    Precision.TF32: "32-true",
    Precision.FP32: "32-true",
}


def trainer_kwargs(plan: Plan) -> dict[str, Any]:
    """`precision`, `accelerator`, `devices` and `strategy` for `lightning.Trainer`.

    Args:
        plan: a plan, e.g. from `accelkit.auto_configure()` or, for hardware you don't
            have, `accelkit.plan_for("A100-SXM4-80GB")`.

    Returns:
        ``precision``: "bf16-mixed", "16-mixed" or "32-true" from `plan.precision`;
        ``accelerator``: "gpu" when the plan is for NVIDIA GPUs, else "cpu";
        ``devices``: the processes of this node when the plan distributes (torchrun's
        ``LOCAL_WORLD_SIZE``, else every GPU), else 1;
        ``strategy``: "ddp" when the plan distributes (`Distribution.DDP`), else "auto".
        A plan that did not distribute several GPUs (no launcher) says in its
        ``launch`` setting how to start the run so that it does.

    Example:
        >>> import accelkit
        >>> trainer_kwargs(accelkit.plan_for("Tesla T4"))
        {'precision': '16-mixed', 'accelerator': 'gpu', 'devices': 1, 'strategy': 'auto'}
    """
    precision = Precision.parse(plan.precision)
    if precision not in _PRECISION:
        raise ValueError(
            f"plan.precision={precision.value!r} is not decided yet; "
            f"give a plan from accelkit.plan_for() or auto_configure()"
        )
    gpu = plan.device_type == "cuda"
    ddp = Distribution.parse(plan.distribution) is Distribution.DDP
    devices = 1
    if ddp:
        devices = plan.hardware.launcher.local_world_size or max(1, plan.hardware.gpu_count)
    return {
        "precision": _PRECISION[precision],
        "accelerator": "gpu" if gpu else "cpu",
        "devices": devices,
        "strategy": "ddp" if ddp else "auto",
    }
