"""A Keras model's dtypes: float32 outputs under a mixed policy (`float32_head`), and
the precision its layers really compute in (`precision_ran`)."""

from __future__ import annotations

from typing import Any

from accelkit.hardware import capabilities
from accelkit.planning import Plan, Precision
from accelkit.utils.imports import require


def _keras() -> Any:
    return require("keras")


def float32_head(model: Any) -> Any:
    """Return `model` with float32 outputs under a mixed policy.

    Softmax and losses computed in float16/bfloat16 lose precision, so the
    outputs are cast back to float32 (TensorFlow mixed-precision guide). A
    model whose outputs are already float32 is returned unchanged; otherwise
    a functional model is wrapped with a float32 `Activation('linear')` per
    output, and a subclassed model in a small wrapper that casts.

    Example:
        >>> import accelkit
        >>> import keras
        >>> keras.mixed_precision.set_global_policy("mixed_float16")
        >>> inputs = keras.Input((4,))
        >>> model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
        >>> model.output.dtype
        'float16'
        >>> model = accelkit.keras.float32_head(model)
        >>> keras.mixed_precision.set_global_policy("float32")
        >>> model.output.dtype
        'float32'
    """
    keras = _keras()
    if outputs_float32(model):
        return model
    inputs, outputs = _symbolic_io(model)
    if inputs and outputs:
        cast = [
            keras.layers.Activation("linear", dtype="float32", name=f"float32_head_{i}")(o)
            for i, o in enumerate(outputs)
        ]
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
    model_class: Any = keras.Model  # a base class read off a module: Any to mypy

    class Float32Head(model_class):
        """Calls the wrapped model and casts its outputs to float32."""

        def __init__(self, inner: Any, **kwargs: Any) -> None:
            super().__init__(name=f"{inner.name}_float32_head", **kwargs)
            self.inner = inner

        def call(self, *args: Any, **kwargs: Any) -> Any:
            outputs = self.inner(*args, **kwargs)
            return keras.tree.map_structure(lambda t: keras.ops.cast(t, "float32"), outputs)

    return Float32Head


def _Float32Head(model: Any) -> Any:
    return _float32_head_class()(model)


def precision_ran(model: Any, plan: Plan) -> Precision | None:
    """The precision the model's weighted layers computed in, which is what ran whatever
    the plan says (a model built under another policy keeps it); None when unknown.

    Example:
        >>> import accelkit
        >>> import keras
        >>> keras.mixed_precision.set_global_policy("mixed_float16")
        >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        >>> keras.mixed_precision.set_global_policy("float32")
        >>> precision_ran(model, accelkit.plan_for(None, framework="tensorflow"))   # fp32 plan
        <Precision.FP16: 'fp16'>
    """
    try:
        layers = model._flatten_layers(include_self=False, recursive=True)
        dtypes = [
            str(layer.compute_dtype)
            for layer in layers
            if getattr(layer, "kernel", None) is not None
        ]
    except Exception:  # noqa: BLE001 - unknown: the plan's precision stands
        return None
    if not dtypes:
        return None
    most = max(set(dtypes), key=dtypes.count)
    ran = Precision.parse(capabilities.precision_of_policy(most))
    if ran is Precision.FP32 and not plan.mixed:
        return plan.precision  # fp32 or tf32: the layers cannot tell them apart
    return ran
