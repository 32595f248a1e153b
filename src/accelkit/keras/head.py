"""Float32 outputs under a mixed Keras policy: `float32_head(model)`."""

from __future__ import annotations

from typing import Any

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


def _Float32Head(model: Any) -> Any:
    return _float32_head_class()(model)
