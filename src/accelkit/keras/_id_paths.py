"""Where token ids travel in a Keras model graph: from a floating model input, through
the layers that autocast them, to an integer lookup. Used by `accelkit.keras.checks`.

Keras casts a layer's floating inputs to its compute dtype when the layer autocasts
(every layer but `Embedding`, `CategoryEncoding` and functional models by default;
a subclassed model casts its own inputs too), so a float id that passes through one
under a 16-bit policy is rounded before any integer cast.
"""

from __future__ import annotations

from typing import Any

from accelkit.hardware import float_formats


def lookups(keras: Any) -> tuple[type, ...]:
    """The layers that read integer ids (their vocabulary: `input_dim`, `num_tokens`)."""
    return (keras.layers.Embedding, keras.layers.CategoryEncoding)


def float_id_paths(model: Any) -> list[dict[str, Any]]:
    """The `accelkit.keras.checks.float_ids` findings of a model with a functional graph
    (none without one)."""
    import keras

    inputs, outputs = symbolic(model, "inputs"), symbolic(model, "outputs")
    if not inputs or not outputs:
        return []
    found: dict[tuple[str, str], dict[str, Any]] = {}
    stack, seen = list(outputs), set()
    while stack:
        op, node = producer(stack.pop())
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        stack.extend(node.input_tensors)
        if _is_model(op):
            for finding in _nested(op, node):
                found.setdefault((finding["layer"], finding["input"]), finding)
            continue
        lookup = lookup_in(keras, op)
        if lookup is None:
            continue
        for source, path in _float_sources(node):
            cast = _first_cast(keras, path if lookup is op else [*path, (op, None)])
            if cast is not None:
                finding = _finding(op, lookup, source, cast)
                found.setdefault((finding["layer"], finding["input"]), finding)
    return list(found.values())


def _nested(model: Any, node: Any) -> list[dict[str, Any]]:
    """A functional model used as a layer: its own findings, renamed to the outer input."""
    inner = float_id_paths(model)
    outer = list(node.input_tensors)
    names = [producer(t)[0].name for t in model.inputs]
    result = []
    for finding in inner:
        index = names.index(finding["input"]) if finding["input"] in names else -1
        if not 0 <= index < len(outer):
            continue
        for source, _ in _float_sources_of(outer[index], [], set()):
            result.append(
                {**finding, "layer": f"{model.name}/{finding['layer']}", **_input_fields(source)}
            )
    return result


def _float_sources(node: Any) -> list[tuple[Any, list[tuple[Any, Any]]]]:
    """(model input tensor, [(op, its output) from that input to `node`]) for every
    floating model input whose values reach `node` unchanged by weights."""
    seen: set[int] = set()
    found: list[tuple[Any, list[tuple[Any, Any]]]] = []
    for tensor in node.input_tensors:
        found.extend(_float_sources_of(tensor, [], seen))
    return found


def _float_sources_of(
    tensor: Any, path: list[tuple[Any, Any]], seen: set[int]
) -> list[tuple[Any, list[tuple[Any, Any]]]]:
    op, node = producer(tensor)
    if node is None:
        return []
    if not is_float(dtype_name(tensor)) and type(op).__name__ != "Cast":
        return []  # integers made here (a lookup, a hash, a bin): not float ids upstream
    if type(op).__name__ == "InputLayer" or node.is_input:
        return [(tensor, path)]
    if id(node) in seen or getattr(op, "weights", None):
        return []  # visited, or a layer with weights: its outputs are new values, not ids
    seen.add(id(node))
    found: list[tuple[Any, list[tuple[Any, Any]]]] = []
    for parent in node.input_tensors:
        found.extend(_float_sources_of(parent, [(op, tensor), *path], seen))
    return found


def _first_cast(keras: Any, path: list[tuple[Any, Any]]) -> tuple[str, str] | None:
    """(name, dtype) of the op that puts the ids into a float compute dtype: the first on
    the path that makes them 16-bit, else the first float32 autocasting layer (16-bit once
    rebuilt under a mixed policy); None when nothing on the path casts them."""
    casts: list[tuple[str, str]] = []
    for op, output in path:
        dtype = None
        if (
            isinstance(op, keras.layers.Layer)
            and getattr(op, "autocast", False)
            and getattr(op, "_convert_input_args", True)
            and is_float(op.compute_dtype)
        ):
            dtype = str(op.compute_dtype)
        if output is not None and float_formats.is_half(dtype_name(output)):
            dtype = dtype_name(output)
        if dtype is not None:
            casts.append((op.name, dtype))
    half = [cast for cast in casts if float_formats.is_half(cast[1])]
    if half:
        return half[0]
    return casts[0] if casts else None


def lookup_in(keras: Any, op: Any) -> Any:
    """The integer lookup `op` is or holds (the largest vocabulary), else None."""
    kinds = lookups(keras)
    if isinstance(op, kinds):
        return op
    if not isinstance(op, keras.layers.Layer):
        return None
    held = [
        layer
        for layer in op._flatten_layers(include_self=False, recursive=True)
        if isinstance(layer, kinds)
    ]
    return max(held, key=lambda layer: _vocabulary(layer) or 0) if held else None


def _finding(op: Any, lookup: Any, source: Any, cast: tuple[str, str]) -> dict[str, Any]:
    return {
        "layer": op.name,
        "type": type(op).__name__,
        "embedding": _attribute(op, lookup),
        "input_dim": _vocabulary(lookup),
        **_input_fields(source),
        "cast_by": cast[0],
        "cast_dtype": cast[1],
    }


def _input_fields(tensor: Any) -> dict[str, Any]:
    shape = [None if d is None else int(d) for d in tuple(tensor.shape)[1:]]
    return {
        "input": producer(tensor)[0].name,
        "input_dtype": dtype_name(tensor),
        "input_shape": shape,
    }


def _attribute(parent: Any, layer: Any) -> str:
    """``layer``'s attribute name in `parent` (``token_emb``), else its layer name."""
    if parent is layer:
        return layer.name
    for name, value in vars(parent).items():
        if value is layer and not name.startswith("_"):
            return name
    return layer.name


def _vocabulary(layer: Any) -> int | None:
    value = getattr(layer, "input_dim", None) or getattr(layer, "num_tokens", None)
    return None if value is None else int(value)


def symbolic(model: Any, name: str) -> list[Any] | None:
    try:
        value = getattr(model, name, None)
    except (AttributeError, ValueError):  # subclassed models have no symbolic inputs
        return None
    return list(value) if value else None


def producer(tensor: Any) -> tuple[Any, Any]:
    """(operation, node) that produced a symbolic tensor; (None, None) when unknown."""
    history = getattr(tensor, "_keras_history", None)
    if history is None or history.operation is None:
        return None, None
    nodes = history.operation._inbound_nodes
    node = nodes[history.node_index] if history.node_index < len(nodes) else None
    return history.operation, node


def _is_model(op: Any) -> bool:
    return bool(symbolic(op, "inputs")) and hasattr(op, "operations")


def dtype_name(tensor: Any) -> str:
    dtype = getattr(tensor, "dtype", tensor)
    return str(getattr(dtype, "name", dtype))


def is_float(dtype: Any) -> bool:
    return dtype_name(dtype) in ("float16", "bfloat16", "float32", "float64")
