"""A Keras model's dtypes: float32 outputs under a mixed policy (`float32_head`), and
the precision its layers really compute in (`precision_ran`).

TensorFlow's mixed-precision guide keeps the last activation in float32: the logits
may come out of a float16 layer, but the softmax or sigmoid on them is computed in
float32 (``layers.Activation("sigmoid", dtype="float32")``). Casting the output after a
float16 sigmoid is not the same: sigmoid(12) is exactly 1.0 in float16, so binary
cross-entropy against 0 is 12.3 instead of 8.3 and its gradient a fifth of the true one.
`float32_head` therefore recomputes each output's last activation in float32 from the
logits, with the same weights, and says so where it can only cast.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
from collections.abc import Callable
from typing import Any

from accelkit.frameworks.keras_train_step import overrides_training
from accelkit.hardware import capabilities
from accelkit.keras import _id_paths, checks
from accelkit.planning import Plan, Precision
from accelkit.utils.imports import require

_log = logging.getLogger("accelkit")
# Layers whose activation is the last thing their call does (`x = self.activation(x)`):
# their logits are the layer's output with the activation left out.
_LOGIT_LAYERS = (
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
    "DepthwiseConv1D",
    "DepthwiseConv2D",
)
# Activation layers without weights: rebuilt as they are, with a float32 policy.
_ACTIVATION_LAYERS = ("Activation", "Softmax", "ReLU", "LeakyReLU", "ELU")
# Swapping a shared layer's activation while it is traced: one trace at a time (replica
# threads of MirroredStrategy trace the step concurrently).
_SWAP = threading.RLock()


def _keras() -> Any:
    return require("keras")


def float32_head(model: Any) -> Any:
    """Return `model` with float32 outputs under a mixed policy, the last activation
    computed in float32.

    Each output of a functional or built Sequential model whose dtype is 16-bit gets
    a float32 head (TensorFlow's mixed-precision guide): an activation layer
    (`Activation`, `Softmax`, `ReLU`...) is computed again in float32 on its float16
    input; a `Dense`, `Conv` or `EinsumDense` with an activation gives its logits
    (same weights, activation left out) to a float32 `Activation` of the same
    function; a linear output is cast. Any other output (an `LSTM`'s, a custom
    layer's, a nested model's) is cast, with a warning that its activation stays 16-bit.
    A subclassed model is wrapped in a model that casts its outputs, with the same
    warning: its `call` is opaque. A model that overrides `train_step`, `test_step` or
    `compute_loss` is returned as it is, with a warning (a wrapper would drop them).
    A model whose outputs are float32 already is returned unchanged.

    The outputs keep their names and structure: each float32 layer takes the name of
    the output it replaces (the `Dense` whose logits it reads is then wrapped as
    ``<name>_logits``), a dict of outputs stays a dict with its keys and a list a list,
    so a compile with ``loss={"cls": ..., "reg": ...}`` and callbacks monitoring
    ``val_cls_loss`` work unchanged.

    Example:
        >>> import accelkit
        >>> import keras
        >>> keras.mixed_precision.set_global_policy("mixed_float16")
        >>> inputs = keras.Input((4,))
        >>> model = keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid")(inputs))
        >>> model.output.dtype
        'float16'
        >>> model = accelkit.keras.float32_head(model)
        >>> keras.mixed_precision.set_global_policy("float32")
        >>> model.output.dtype, model.layers[-1].activation.__name__   # sigmoid in float32
        ('float32', 'sigmoid')
    """
    return with_float32_head(model)[0]


def with_float32_head(model: Any) -> tuple[Any, list[str]]:
    """`float32_head`'s model and what was done to each output, one line each
    (``"dense: sigmoid recomputed in float32"``, ``"lstm: cast after its tanh..."``)."""
    keras = _keras()
    if outputs_float32(model):
        return model, []
    if overrides_training(model):
        message = (
            f"{model.name} has its own {overrides_training(model)}: returned as it is, not "
            f"wrapped (a wrapper would drop it). {checks.IN_CALL_FIX}"
        )
        _log.warning("accelkit: %s", message)
        return model, [message]
    inputs, outputs = _symbolic_io(model)
    if not (inputs and outputs):
        message = (
            f"{model.name} is subclassed: its outputs are cast to float32 after its call(); "
            f"an activation inside call() stays 16-bit. {checks.IN_CALL_FIX}"
        )
        _log.warning("accelkit: %s", message)
        return _float32_head_class()(model), [message]
    taken = _names_upstream(outputs)
    parts = [_head(keras, output, taken) for output in outputs]
    names = [_output_name(output) for output in outputs]
    heads = _named_heads(parts, names)
    done = [part.what for part in parts]
    for what in done:
        if "stays" in what:
            _log.warning("accelkit: %s", what)
    wrapped = keras.Model(
        getattr(model, "_inputs_struct", inputs),
        keras.tree.pack_sequence_as(_outputs_struct(model, outputs), heads),
        name=model.name,
    )
    # An output whose layer stays in the graph: the head has another name, the output
    # keeps the model's (compile and logs read `output_names`).
    wrapped.output_names = names
    return wrapped, done


@dataclasses.dataclass(frozen=True)
class _Head:
    """One output's float32 head before it is named: the tensor it is computed from,
    the float32 layer computing it (given its name), and what it is."""

    source: Any
    layer: Callable[[str], Any] | None  # None: the output is float32 already
    what: str


def _head(keras: Any, output: Any, taken: set[str]) -> _Head:
    """One output's float32 head; `taken` (the graph's layer names) gets the names of
    the layers added on the way."""
    if _id_paths.dtype_name(output) == "float32":
        return _Head(output, None, "")
    layer, node = _id_paths.producer(output)
    inputs = list(getattr(node, "input_tensors", None) or ())
    kind = type(layer).__name__ if layer is not None else ""
    name = getattr(layer, "name", "output")
    if len(inputs) == 1 and kind in _ACTIVATION_LAYERS and not layer.weights:
        config = {**layer.get_config(), "dtype": "float32"}
        return _Head(
            inputs[0],
            lambda head_name: type(layer).from_config({**config, "name": head_name}),
            f"{name}: recomputed in float32",
        )
    activation = getattr(layer, "activation", None)
    linear = activation is None or getattr(activation, "__name__", "") == "linear"
    if len(inputs) == 1 and kind in _LOGIT_LAYERS:
        logits_name = _unique(f"{name}_logits", taken)
        logits = _logits_class()(layer, name=logits_name)(inputs[0])
        head = functools.partial(
            keras.layers.Activation, "linear" if linear else activation, dtype="float32"
        )
        what = (
            "linear, cast to float32"
            if linear
            else f"{_named(activation)} recomputed in float32 from its logits"
        )
        return _Head(logits, lambda head_name: head(name=head_name), f"{name}: {what}")
    return _Head(
        output,
        lambda head_name: keras.layers.Activation("linear", dtype="float32", name=head_name),
        f"{name} ({kind}): cast to float32 after it; whatever activation it applies stays "
        f"{_id_paths.dtype_name(output)}: end the model with its logits and "
        'keras.layers.Activation(..., dtype="float32")',
    )


def _named_heads(parts: list[_Head], names: list[str]) -> list[Any]:
    """The head tensors, each float32 layer named after its output, as the guide names
    its float32 `Activation`: the output's layer is no longer in the graph (`Logits`
    wraps it, or it is rebuilt in float32), so `cls_loss` stays `cls_loss`. An output
    whose layer stays in the graph (it also feeds another layer, or its head can only
    cast it) cannot lend its name: its head is ``<name>_float32``, and the model's
    `output_names` keep the name for compile and logs."""
    taken = _names_upstream([part.source for part in parts])
    heads = []
    for part, name in zip(parts, names, strict=True):
        if part.layer is None:
            heads.append(part.source)
            continue
        head_name = _unique(f"{name}_float32", taken) if name in taken else name
        taken.add(head_name)
        heads.append(part.layer(head_name)(part.source))
    return heads


def _output_name(output: Any) -> str:
    """The name Keras gives an output in `output_names`: its layer's."""
    layer, _ = _id_paths.producer(output)
    return str(getattr(layer, "name", "output"))


def _names_upstream(tensors: list[Any]) -> set[str]:
    """The names of the layers (and ops) computing `tensors`, down to the inputs: the
    names a functional model over them already uses."""
    names: set[str] = set()
    stack, seen = list(tensors), set()
    while stack:
        op, node = _id_paths.producer(stack.pop())
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        names.add(op.name)
        stack.extend(node.input_tensors)
    return names


def _unique(name: str, taken: set[str]) -> str:
    """`name`, or `name_1`, `name_2`... the first not in `taken`, which then holds it."""
    candidate, i = name, 0
    while candidate in taken:
        i += 1
        candidate = f"{name}_{i}"
    taken.add(candidate)
    return candidate


def _outputs_struct(model: Any, outputs: list[Any]) -> Any:
    """The structure of `model`'s outputs (a dict stays a dict, a list of one a list)."""
    structure = getattr(model, "_outputs_struct", None)  # functional models
    if structure is not None:
        return structure
    return outputs[0] if len(outputs) == 1 else list(outputs)


def _named(activation: Any) -> str:
    return str(getattr(activation, "__name__", type(activation).__name__))


@functools.cache
def _logits_class() -> type:
    """A layer giving another layer's output with its activation left out (same weights),
    registered for `keras.saving` as ``accelkit>Logits``."""
    keras = _keras()
    layer_class: Any = keras.layers.Layer

    @keras.saving.register_keras_serializable(package="accelkit")
    class Logits(layer_class):
        """`layer`'s output without its activation: the logits of its float32 head."""

        def __init__(self, layer: Any, **kwargs: Any) -> None:
            kwargs.setdefault("name", f"{layer.name}_logits")
            kwargs.setdefault("dtype", layer.dtype_policy)
            super().__init__(autocast=False, **kwargs)
            self.layer = layer
            self._activation = layer.activation  # the one to put back, whatever the timing

        def call(self, inputs: Any) -> Any:
            with _SWAP:
                self.layer.activation = keras.activations.linear
                try:
                    return self.layer(inputs)
                finally:
                    self.layer.activation = self._activation

        def get_config(self) -> dict[str, Any]:
            layer = keras.saving.serialize_keras_object(self.layer)
            return {**super().get_config(), "layer": layer}

        @classmethod
        def from_config(cls, config: dict[str, Any]) -> Any:
            layer = keras.saving.deserialize_keras_object(config.pop("layer"))
            return cls(layer, **config)

    return Logits


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
