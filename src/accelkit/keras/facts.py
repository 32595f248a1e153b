"""Facts about a Keras model, its dtype policy and its input, for the advisor.

Called by `accelkit.keras.ProfileCallback` and `accelkit.keras.fit`, once per
run. Every function returns plain data and never raises into the run.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

_log = logging.getLogger("accelkit")
_MAX_LAYERS = 2000
# Layers whose work is matmuls: their dtype policy decides tensor-core use.
_MATMUL = (
    "Dense",
    "EinsumDense",
    "Conv1D",
    "Conv2D",
    "Conv3D",
    "Conv1DTranspose",
    "Conv2DTranspose",
    "Conv3DTranspose",
    "SeparableConv1D",
    "SeparableConv2D",
    "DepthwiseConv2D",
    "MultiHeadAttention",
    "GroupQueryAttention",
)


def model_facts(model: Any) -> dict[str, Any]:
    """Matmul layer dimensions, parameter sizes and layers off the global dtype policy.

    Example:
        >>> import keras
        >>> inputs = keras.Input((512,))
        >>> model_facts(keras.Model(inputs, keras.layers.Dense(1001, name="head")(inputs)))[
        ...     "layers"]
        [{'name': 'head', 'type': 'Dense', 'dims': {'in_features': 512, 'out_features': 1001}}]
    """
    import keras

    facts: dict[str, Any] = {}
    try:
        layers = _flat_layers(model)
        facts["layers"] = [found for found in map(_dims, layers) if found][:_MAX_LAYERS]
        weights = model.trainable_weights
        facts["parameters"] = int(sum(_size(w.shape) for w in weights))
        facts["parameter_bytes"] = int(sum(_size(w.shape) * _itemsize(w.dtype) for w in weights))
        optimizer = getattr(model, "optimizer", None)
        state = sum(
            _size(v.shape) * _itemsize(v.dtype) for v in getattr(optimizer, "variables", ()) or ()
        )
        # Gradients are transient in Keras' step, but they exist at the peak.
        facts["model_state_bytes"] = int(2 * facts["parameter_bytes"] + state)
        facts["compiled"] = bool(getattr(model, "jit_compile", False))
        policy = keras.mixed_precision.global_policy()
        facts["keras_policy"] = policy.name
        outputs = _output_layers(model)
        matmul = _matmul_layers(model)
        facts["keras_matmul_layers"] = len(matmul)
        facts["keras_layers_off_policy"] = [
            {
                "name": layer.name,
                "type": type(layer).__name__,
                "compute_dtype": str(layer.compute_dtype),
            }
            for layer in matmul
            if str(layer.compute_dtype) != policy.compute_dtype and id(layer) not in outputs
        ]
    except Exception as error:  # noqa: BLE001 - facts are optional; the run goes on
        facts["facts_error"] = f"{type(error).__name__}: {error}"
    return facts


def weights_finite(model: Any) -> bool | None:
    """True when every trainable weight is finite (checked on the device: one boolean
    each comes back); None when unreadable. Read when a loss turned NaN or infinite:
    finite weights say its gradients stayed finite (a loss that overflowed, not a model
    that diverged).

    Example:
        >>> import keras
        >>> weights_finite(keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)]))
        True
    """
    try:
        import keras

        return all(bool(keras.ops.all(keras.ops.isfinite(w))) for w in model.trainable_weights)
    except Exception as error:  # noqa: BLE001 - a fact for the advisor, never a failure
        _log.debug("weights unreadable: %s", error)
        return None


def loss_scale(optimizer: Any, *, initial: bool = False) -> float | None:
    """A LossScaleOptimizer's (mixed_float16) current or initial loss scale; None for any
    other optimizer, or when it cannot be read (a fact for the advisor, never a failure)."""
    try:
        if initial:
            scale = getattr(optimizer, "initial_scale", None)
        else:
            variable = getattr(optimizer, "dynamic_scale", None)
            scale = None if variable is None else np.asarray(variable)
        return None if scale is None else float(scale)
    except Exception as error:  # noqa: BLE001 - a fact for the advisor, never a failure
        _log.debug("loss scale unreadable: %s", error)
        return None


def device_label(replicas: int, gpus: int, gpu_name: str | None) -> str:
    """What ran the fit, as the report names it.

    Example:
        >>> device_label(2, 2, "NVIDIA H100 80GB HBM3"), device_label(2, 0, None)
        ('2 x NVIDIA H100 80GB HBM3', '2 x cpu')
    """
    if gpus:
        return f"{replicas} x {gpu_name}" if gpu_name else "GPU:0"
    return f"{replicas} x cpu" if replicas > 1 else "cpu"


def _flat_layers(model: Any, *, recursive: bool = True) -> list[Any]:
    """The layers inside `model` (all of them, or its direct children)."""
    try:
        return list(model._flatten_layers(include_self=False, recursive=recursive))
    except Exception:  # noqa: BLE001 - private API; the listed layers are still useful
        return list(getattr(model, "layers", ()))


def _matmul_layers(model: Any) -> list[Any]:
    """Matmul layers, a composite one once: a `MultiHeadAttention` is one layer, judged by
    its own policy, its query/key/value/output `EinsumDense` sublayers not counted again."""
    found: list[Any] = []
    seen: set[int] = set()
    stack = list(reversed(_flat_layers(model, recursive=False)))
    while stack and len(found) < _MAX_LAYERS:
        layer = stack.pop()
        if id(layer) in seen:  # a shared layer
            continue
        seen.add(id(layer))
        if type(layer).__name__ in _MATMUL:
            found.append(layer)
        else:
            stack.extend(reversed(_flat_layers(layer, recursive=False)))
    return found


def _output_layers(model: Any) -> set[int]:
    """The layers producing the model's outputs: meant to stay float32 under a mixed policy."""
    try:
        found = {id(tensor._keras_history.operation) for tensor in model.outputs or ()}
    except Exception:  # noqa: BLE001 - subclassed models have no symbolic outputs
        found = set()
    layers = getattr(model, "layers", None)
    if not found and layers:
        found.add(id(layers[-1]))
    return found


def _dims(layer: Any) -> dict[str, Any] | None:
    kind = type(layer).__name__
    kernel = getattr(layer, "kernel", None) if getattr(layer, "built", False) else None
    shape = tuple(int(d) for d in kernel.shape) if kernel is not None else ()
    if kind == "Dense" and len(shape) == 2:
        dims = {"in_features": shape[0], "out_features": shape[1]}
    elif kind.startswith("Conv") and len(shape) >= 3:
        dims = {"in_channels": shape[-2], "out_channels": shape[-1]}
        if "Transpose" in kind:
            dims = {"in_channels": shape[-1], "out_channels": shape[-2]}
    elif kind == "EinsumDense" and shape:
        dims = {f"kernel_dim{i}": d for i, d in enumerate(shape)}
    elif kind == "Embedding" and getattr(layer, "built", False):
        dims = {"input_dim": int(layer.input_dim), "output_dim": int(layer.output_dim)}
    else:
        return None
    return {"name": layer.name, "type": kind, "dims": dims}


def _size(shape: Any) -> int:
    total = 1
    for d in shape:
        total *= int(d)
    return total


def _itemsize(dtype: Any) -> int:
    name = str(getattr(dtype, "name", dtype))
    return {"float16": 2, "bfloat16": 2, "float64": 8, "int64": 8, "int8": 1, "uint8": 1}.get(
        name, 4
    )


def input_facts(x: Any) -> dict[str, Any]:
    """What feeds `model.fit`: a tf.data pipeline (its prefetch, cache and parallel maps),
    a `keras.utils.PyDataset` (workers), or arrays.

    Example:
        >>> import tensorflow as tf
        >>> input_facts(tf.data.Dataset.range(8).batch(2).prefetch(2))["prefetch"]
        True
    """
    try:
        import tensorflow as tf

        if isinstance(x, tf.data.Dataset):
            return {"type": "tf.data.Dataset", **_pipeline(x)}
        import keras

        if isinstance(x, keras.utils.PyDataset):
            return {
                "type": "PyDataset",
                "workers": getattr(x, "workers", None),
                "use_multiprocessing": getattr(x, "use_multiprocessing", None),
            }
        return {
            "type": "arrays"
            if hasattr(x, "shape") or isinstance(x, (list, tuple, dict))
            else type(x).__name__
        }
    except Exception as error:  # noqa: BLE001 - facts are optional
        return {"type": type(x).__name__, "facts_error": str(error)}


def _pipeline(dataset: Any) -> dict[str, Any]:
    """Walk a tf.data graph from the last transformation back to its source."""
    kinds: list[str] = []
    node, seen = dataset, 0
    while node is not None and seen < 200:
        kinds.append(type(node).__name__.lstrip("_"))
        try:
            inputs = node._inputs()
        except Exception:  # noqa: BLE001 - private API: stop where it is unreadable
            break
        node, seen = (inputs[0] if inputs else None), seen + 1
    return {
        "prefetch": any(k.startswith("Prefetch") for k in kinds),
        "cache": any(k.startswith("Cache") for k in kinds),
        "map": sum(k in ("MapDataset", "ParallelMapDataset") for k in kinds),
        "parallel_map": sum(k.startswith("ParallelMap") for k in kinds),
        "interleave": any("Interleave" in k for k in kinds),
    }
