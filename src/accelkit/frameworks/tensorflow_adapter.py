"""Applies a plan to TensorFlow and Keras 3: one small function per technique.

Imported only when a TensorFlow plan is applied. What a Keras user calls (the
strategy, `float32_head`, the fit) lives in `accelkit.keras`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from accelkit.frameworks import keras_train_step
from accelkit.frameworks._common import Outcome, apply_env, is_ours, set_by_us, walk
from accelkit.hardware import capabilities
from accelkit.planning.keys import Key
from accelkit.planning.types import Plan, Setting, Status
from accelkit.utils.imports import require

_log = logging.getLogger("accelkit")
OPT_OUT = (
    "accelkit.auto_configure(precision='fp32'), or ACCELKIT_PRECISION=fp32, before the "
    "model is built"
)
_announced: set[str] = set()  # policies described in this process: said once


def _tf() -> Any:
    return require("tensorflow")


def _keras() -> Any:
    return require("keras")


def apply(plan: Plan) -> Plan:
    """Apply every TensorFlow setting of `plan`; returns the plan with outcomes recorded."""
    _tf()
    return walk(plan, appliers(), framework="tensorflow")


def _gpus_initialised() -> bool:
    """True once TensorFlow has created its devices (its start-up variables are read then)."""
    from tensorflow.python.eager import context

    return context.context()._context_handle is not None


def apply_mixed_precision(setting: Setting) -> Outcome:
    """Set the Keras global dtype policy; layers built from now on follow it."""
    keras = _keras()
    current = keras.mixed_precision.global_policy().name
    if current == setting.value:
        return Status.ALREADY_SET, f"policy {current!r}"
    if current != "float32" and not is_ours(setting.key, current):
        return Status.KEPT_USER_VALUE, f"policy {current!r} set by the user"
    keras.mixed_precision.set_global_policy(setting.value)
    set_by_us(setting.key, setting.value)
    if capabilities.precision_of_policy(setting.value) == "fp16":  # mixed_float16
        keras_train_step.guard_at_compile()  # a custom train_step's gradients, unscaled
    if setting.value not in _announced and str(setting.value).startswith("mixed"):
        _announced.add(setting.value)
        _log.info("accelkit: %s", policy_message(setting.value))
    return Status.APPLIED, "models built before this call keep their old policy"


def policy_message(policy: str) -> str:
    """What setting the Keras global `policy` changes for the user's code, and the way out.

    Example:
        >>> policy_message(capabilities.keras_policy("fp16")).split(":")[0]
        'Keras dtype policy mixed_float16'
    """
    dtype = "bfloat16" if "bfloat16" in policy else "float16"
    scaling = (
        " compile() wraps the optimizer in a LossScaleOptimizer, so a custom train_step "
        "must call loss = self.optimizer.scale_loss(loss) inside its GradientTape "
        "(accelkit makes up for one that does not in models compiled after it set the "
        "policy, and in ProfileCallback's fits, and says so);"
        if capabilities.precision_of_policy(policy) == "fp16"  # mixed_float16
        else ""
    )
    return (
        f"Keras dtype policy {policy}: layers built from now on compute in {dtype} and "
        f"keep float32 weights;{scaling} code that makes its own float32 tensors beside "
        "them (tf.random.normal without a dtype in a custom layer) or feeds a FeatureSpace "
        f"can fail with a dtype error. To opt out: {OPT_OUT} (docs/keras.md, known "
        "incompatibilities)"
    )


def apply_tf32(setting: Setting) -> Outcome:
    tf = _tf()
    if tf.config.experimental.tensor_float_32_execution_enabled() == bool(setting.value):
        return Status.ALREADY_SET, "TensorFlow's default" if setting.value else ""
    tf.config.experimental.enable_tensor_float_32_execution(bool(setting.value))
    return Status.APPLIED, ""


def apply_memory_growth(setting: Setting) -> Outcome:
    tf = _tf()
    user = os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH")
    if user is not None and user.lower() != "true":
        return Status.KEPT_USER_VALUE, f"TF_FORCE_GPU_ALLOW_GROWTH={user!r} set by the user"
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return Status.NOT_APPLICABLE, "TensorFlow sees no GPU in this process"
    if all(tf.config.experimental.get_memory_growth(gpu) for gpu in gpus):
        return Status.ALREADY_SET, f"on for {len(gpus)} GPU(s)"
    try:
        for gpu in gpus:
            tf.config.experimental.set_memory_growth(gpu, True)
    except RuntimeError:
        return Status.FAILED, (
            "TensorFlow has already initialised its GPUs; call "
            "auto_configure() before creating models or tensors. The run "
            "goes on with TensorFlow's default (all memory mapped)"
        )
    return Status.APPLIED, f"on for {len(gpus)} GPU(s)"


def apply_thread_mode(setting: Setting) -> Outcome:
    status, detail = apply_env(setting.key.value, str(setting.value))
    if status is Status.APPLIED and _gpus_initialised():
        # Too late for this process: leave no variable behind for the next call or children.
        os.environ.pop(setting.key.value, None)
        return Status.FAILED, (
            "TensorFlow has already started and read its variables; "
            "export it in the shell to take effect"
        )
    return status, detail


def appliers() -> dict[Key, Callable[[Setting], Outcome]]:
    """The applier of each setting the adapter applies (looked up when called)."""
    return {
        Key.KERAS_POLICY: apply_mixed_precision,
        Key.TF_TF32: apply_tf32,
        Key.TF_MEMORY_GROWTH: apply_memory_growth,
        Key.TF_GPU_THREAD_MODE: apply_thread_mode,
    }
