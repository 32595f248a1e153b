"""Applies a plan to TensorFlow and Keras 3: one small function per technique.

Imported only when a TensorFlow plan is applied or a Keras helper is used.
"""

from __future__ import annotations

import os
from typing import Any

from accelkit.frameworks._common import Outcome, apply_env, is_ours, set_by_us, walk
from accelkit.planning.types import Distribution, Plan, Setting, Status
from accelkit.utils.imports import require

_POLICY_KEY = "keras.mixed_precision.global_policy"


def _tf() -> Any:
    return require("tensorflow")


def _keras() -> Any:
    return require("keras")


def apply(plan: Plan) -> Plan:
    """Apply every TensorFlow setting of `plan`; returns the plan with outcomes recorded."""
    _tf()
    return walk(plan, {
        _POLICY_KEY: apply_mixed_precision,
        "tf.config.experimental.enable_tensor_float_32_execution": apply_tf32,
        "tf.config.experimental.set_memory_growth": apply_memory_growth,
        "TF_GPU_THREAD_MODE": apply_thread_mode,
    }, framework="tensorflow")


def _gpus_initialised() -> bool:
    """True once TensorFlow has created its devices (its start-up variables are read then)."""
    from tensorflow.python.eager import context

    return context.context()._context_handle is not None  # noqa: SLF001 - no public API


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
    return Status.APPLIED, "models built before this call keep their old policy"


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
        return Status.FAILED, ("TensorFlow has already initialised its GPUs; call "
                               "auto_configure() before creating models or tensors. The run "
                               "goes on with TensorFlow's default (all memory mapped)")
    return Status.APPLIED, f"on for {len(gpus)} GPU(s)"


def apply_thread_mode(setting: Setting) -> Outcome:
    status, detail = apply_env(setting.key, str(setting.value))
    if status is Status.APPLIED and _gpus_initialised():
        return Status.FAILED, ("TensorFlow has already started and read its variables; "
                               "export it in the shell to take effect")
    return status, detail


# -- helpers -----------------------------------------------------------------------

# A multi-worker strategy can be created once per process, so strategies are cached
# by what they are.
_strategies: dict[tuple[str, str], Any] = {}


def strategy(plan: Plan) -> Any:
    """The `tf.distribute.Strategy` the plan names, built over the devices TensorFlow sees.

    Built once per process and kind. A MirroredStrategy plan on a machine where
    TensorFlow sees fewer than two GPUs (a what-if plan) falls back to the
    default strategy, with a warning.
    """
    setting = plan.get("tf.distribute.Strategy")
    key = (plan.distribution.value, "" if setting is None else str(setting.value))
    if key not in _strategies:
        _strategies[key] = _build_strategy(plan)
    return _strategies[key]


def _build_strategy(plan: Plan) -> Any:
    tf = _tf()
    if plan.distribution is Distribution.MULTI_WORKER_MIRRORED:
        implementation = (tf.distribute.experimental.CommunicationImplementation.NCCL
                          if tf.config.list_physical_devices("GPU")
                          else tf.distribute.experimental.CommunicationImplementation.RING)
        options = tf.distribute.experimental.CommunicationOptions(implementation=implementation)
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    if plan.distribution is Distribution.MIRRORED:
        gpus = tf.config.list_logical_devices("GPU")
        if len(gpus) >= 2:
            setting = plan.get("tf.distribute.Strategy")
            hierarchical = setting is not None and "Hierarchical" in str(setting.value)
            ops = (tf.distribute.HierarchicalCopyAllReduce() if hierarchical
                   else tf.distribute.NcclAllReduce())
            return tf.distribute.MirroredStrategy([g.name for g in gpus], cross_device_ops=ops)
        import warnings

        warnings.warn(f"the plan asks for MirroredStrategy but TensorFlow sees {len(gpus)} "
                      "GPU(s) here; using the default strategy", stacklevel=3)
    return tf.distribute.get_strategy()


def float32_head(model: Any) -> Any:
    """Return `model` with float32 outputs under a mixed policy.

    Softmax and losses computed in float16/bfloat16 lose precision, so the
    outputs are cast back to float32 (TensorFlow mixed-precision guide). A
    model whose outputs are already float32 is returned unchanged; otherwise
    a functional model is wrapped with a float32 `Activation('linear')` per
    output, and a subclassed model in a small wrapper that casts.

    Example:
        >>> model = accelkit.keras.float32_head(model)
        >>> model.output.dtype
        'float32'
    """
    keras = _keras()
    if outputs_float32(model):
        return model
    inputs, outputs = _symbolic_io(model)
    if inputs and outputs:
        cast = [keras.layers.Activation("linear", dtype="float32", name=f"float32_head_{i}")(o)
                for i, o in enumerate(outputs)]
        return keras.Model(inputs, cast if len(cast) > 1 else cast[0], name=model.name)
    return _Float32Head(model)


def outputs_float32(model: Any) -> bool:
    """True when a functional model's outputs are all float32 (False when unknown)."""
    _, outputs = _symbolic_io(model)
    return bool(outputs) and all(_dtype_name(o) == "float32" for o in outputs)


def _symbolic_io(model: Any) -> tuple[Any, Any]:
    try:
        return getattr(model, "inputs", None), model.outputs
    except (AttributeError, ValueError):  # subclassed models have no symbolic outputs
        return None, None


def _dtype_name(tensor: Any) -> str:
    dtype = tensor.dtype
    return getattr(dtype, "name", str(dtype))


def _float32_head_class() -> type:
    keras = _keras()

    class Float32Head(keras.Model):
        """Calls the wrapped model and casts its outputs to float32."""

        def __init__(self, inner: Any, **kwargs: Any) -> None:
            super().__init__(name=f"{inner.name}_float32_head", **kwargs)
            self.inner = inner

        def call(self, *args: Any, **kwargs: Any) -> Any:
            outputs = self.inner(*args, **kwargs)
            return keras.tree.map_structure(lambda t: keras.ops.cast(t, "float32"), outputs)

    return Float32Head


def _Float32Head(model: Any) -> Any:  # noqa: N802 - reads as the class it builds
    return _float32_head_class()(model)
