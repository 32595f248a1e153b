"""Checks that a Keras model computes what it should under a 16-bit dtype policy.

Two ways mixed precision trains a model wrong without an error:

- **token ids declared float.** ``keras.Input(shape=(maxlen,))`` is float32; a
  layer that autocasts its float inputs (any layer but `Embedding` itself: a
  custom ``TokenAndPositionEmbedding``, a ``Lambda``, a ``Reshape``) turns the ids
  into float16 under ``mixed_float16``, which holds integers exactly only up to
  2048 (bfloat16: 256). Then 2049 -> 2048, 12345 -> 12344: most ids of a large
  vocabulary silently look up another token's row, and an id that rounds up to
  the vocabulary size fails on the CPU (on a GPU, ``tf.gather`` returns zeros).
  `float_ids` finds these paths in the model graph, `ids_exceed_float16` finds
  the ids a first batch actually loses.
- **16-bit outputs.** Outputs (and the softmax inside the last layer) in
  float16 lose precision; `float16_outputs` names them
  (`accelkit.keras.float32_head` is the fix).

`check_before_training` raises `UnsafeMixedPrecision` where ids are rounded now.
The inspection functions never raise: a model they cannot read gives no finding.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from accelkit.hardware import float_formats
from accelkit.keras import _id_paths

_log = logging.getLogger("accelkit")

ALLOW_FLOAT_IDS = "allow_float_ids"  # the argument that lets a run train with float ids
# A subclassed model's outputs: only its own call() can compute the activation in float32.
IN_CALL_FIX = (
    "Compute the last activation in float32 in call(): "
    'keras.layers.Activation("sigmoid", dtype="float32")(logits), or give the last '
    'layer dtype="float32" (a wrapper could only cast after it)'
)


class UnsafeMixedPrecision(ValueError):
    """Token ids reach an integer lookup through a 16-bit float: training would use the
    wrong ids. `findings` holds the `float_ids` (or `ids_exceed_float16`) entries."""

    def __init__(self, problems: list[str], findings: list[dict[str, Any]]) -> None:
        self.findings = findings
        super().__init__(
            " ".join(problems)
            + (
                f" To train anyway (every id the data holds is exact in {_dtypes(findings)}), "
                f"pass {ALLOW_FLOAT_IDS}=True to accelkit.keras.fit or ProfileCallback."
            )
        )


def float_ids(model: Any) -> list[dict[str, Any]]:
    """Integer lookups (`Embedding`, `CategoryEncoding`, or a layer that holds one) whose
    ids come from a floating model input through a layer that casts them to its compute
    dtype: under a 16-bit policy that rounds ids above 2048 (float16) or 256 (bfloat16).

    Reported whatever the policy (``cast_dtype`` says what the casting layer computes in
    now): a model built in float32 rounds nothing yet, but will once rebuilt under a
    16-bit policy. Ids fed straight to an `Embedding` are not reported: it does not
    autocast, and float32 holds them exactly. A layer holding several embeddings is
    reported with the largest (the vocabulary). Models without a functional graph
    (subclassed) give no finding here; `ids_exceed_float16` still reads their data.

    Returns:
        ``[{"layer", "type", "embedding", "input_dim", "input", "input_dtype",
        "input_shape", "cast_by", "cast_dtype"}]``, one per lookup and model input.

    Example:
        >>> import keras
        >>> ids = keras.Input(shape=(2,))   # token ids declared float32
        >>> x = keras.layers.Lambda(lambda t: t, name="identity")(ids)   # casts to its dtype
        >>> model = keras.Model(ids, keras.layers.Embedding(20000, 32, name="tokens")(x))
        >>> float_ids(model)[0]["cast_by"]
        'identity'
    """
    try:
        return _id_paths.float_id_paths(model)
    except Exception as error:  # noqa: BLE001 - an inspection, never a failure
        _log.debug("accelkit: float_ids could not read %s: %s", type(model).__name__, error)
        return []


def float16_outputs(model: Any) -> list[str]:
    """The names of the layers producing outputs in float16 or bfloat16 (no float32 head).

    Example:
        >>> import keras
        >>> keras.mixed_precision.set_global_policy("mixed_float16")
        >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, name="out")])
        >>> float16_outputs(model)
        ['out']
        >>> keras.mixed_precision.set_global_policy("float32")
    """
    try:
        outputs = model.outputs or ()
    except (AttributeError, ValueError):  # subclassed models have no symbolic outputs
        return []
    try:
        return [
            _id_paths.producer(t)[0].name
            for t in outputs
            if float_formats.is_half(_id_paths.dtype_name(t))
        ]
    except Exception as error:  # noqa: BLE001 - an inspection, never a failure
        _log.debug("accelkit: float16_outputs could not read the outputs: %s", error)
        return []


def call_float16_outputs(batch_inputs: Any, model: Any) -> list[str]:
    """A subclassed model's 16-bit outputs, found by tracing its `call` on the first
    batch's shapes (nothing runs): ``["<model> output <i>"]``; [] for a functional model
    (`float16_outputs` reads its graph), float32 outputs, or a model it cannot trace.

    Example:
        >>> import keras, numpy as np
        >>> class Net(keras.Model):
        ...     def __init__(self):
        ...         super().__init__(name="net")
        ...         self.dense = keras.layers.Dense(1, activation="sigmoid")
        ...     def call(self, x):
        ...         return self.dense(x)
        >>> keras.mixed_precision.set_global_policy("mixed_float16")
        >>> call_float16_outputs(np.ones((2, 3), "float32"), Net())
        ['net output 0']
        >>> keras.mixed_precision.set_global_policy("float32")
    """
    try:
        import keras

        if _id_paths.symbolic(model, "outputs") or not float_formats.is_half(
            getattr(model, "compute_dtype", None)
        ):
            return []
        specs = keras.tree.map_structure(
            lambda v: keras.KerasTensor((None, *tuple(v.shape)[1:]), dtype=_spec_dtype(v)),
            batch_inputs,
        )
        outputs = keras.tree.flatten(model.compute_output_spec(specs))
        return [
            f"{model.name} output {i}"
            for i, out in enumerate(outputs)
            if float_formats.is_half(_id_paths.dtype_name(out))
        ]
    except Exception as error:  # noqa: BLE001 - an inspection, never a failure
        _log.debug("accelkit: could not trace %s's call: %s", type(model).__name__, error)
        return []


def _spec_dtype(value: Any) -> str:
    import keras

    return str(keras.backend.standardize_dtype(value.dtype))


def ids_exceed_float16(batch_inputs: Any, model: Any) -> dict[str, Any] | None:
    """From a first batch: whole-number data fed to a floating input that a layer casts to
    its float compute dtype on the way to an integer lookup, with values above what a
    16-bit float holds exactly (2048 in float16, 256 in bfloat16).

    Args:
        batch_inputs: the inputs (``x``) as Keras passes them: one array or tensor, a list
            or tuple in `model.inputs` order, or a dict keyed by input name; not (x, y).
            A `PerReplica` value is read through its first replica.
        model: the model they feed. A functional model: the inputs `float_ids` names. A
            subclassed one: float inputs, when the model autocasts them (Keras casts a
            model's float inputs to its compute dtype) and holds an `Embedding`.

    Returns:
        ``{"input", "dtype", "max_id", "values", "changed", "rounded_in", "exact_up_to",
        "example", "cast_by", "cast_dtype"}`` for the input with the largest id:
        ``changed`` of the batch's ``values`` are not exact in ``rounded_in`` (the casting
        layer's 16-bit dtype, float16 when it computes in float32 now), ``example`` is
        ``[the largest id that changes, what it becomes]``; None when no input qualifies.

    Example:
        >>> import keras
        >>> ids = keras.Input(shape=(2,))   # token ids declared float32
        >>> x = keras.layers.Lambda(lambda t: t, name="identity")(ids)   # casts to its dtype
        >>> model = keras.Model(ids, keras.layers.Embedding(20000, 32, name="tokens")(x))
        >>> import numpy as np
        >>> ids_exceed_float16(np.array([[12345.0, 7.0]]), model)["example"]
        [12345, 12344.0]
    """
    try:
        return _ids_exceed(batch_inputs, model)
    except Exception as error:  # noqa: BLE001 - an inspection, never a failure
        _log.debug("accelkit: ids_exceed_float16 could not read the batch: %s", error)
        return None


def mixed_precision_facts(model: Any) -> dict[str, Any]:
    """The model's 16-bit hazards as advisor facts, never raising: ``float_id_inputs``
    (`float_ids`) and ``float16_outputs`` (`float16_outputs`).

    Example:
        >>> import keras
        >>> ids = keras.Input(shape=(2,))   # token ids declared float32
        >>> x = keras.layers.Lambda(lambda t: t, name="identity")(ids)   # casts to its dtype
        >>> model = keras.Model(ids, keras.layers.Embedding(20000, 32, name="tokens")(x))
        >>> facts = mixed_precision_facts(model)     # e.g. callback.facts.update(facts)
        >>> [f["embedding"] for f in facts["float_id_inputs"]], facts["float16_outputs"]
        (['tokens'], [])
    """
    return {"float_id_inputs": float_ids(model), "float16_outputs": float16_outputs(model)}


def check_before_training(
    model: Any, policy_name: str | None = None, *, allow_float_ids: bool = False
) -> list[dict[str, Any]]:
    """Before the first step: the `float_ids` findings, for ``facts["float_id_inputs"]``.

    Raises `UnsafeMixedPrecision` when ids are rounded now: the casting layer computes in
    float16/bfloat16 and the vocabulary reaches past what that dtype holds exactly (a
    model built in float32 rounds nothing yet: the advisor speaks for it). With
    ``allow_float_ids=True`` it logs a warning instead.

    Args:
        model: the Keras model about to train.
        policy_name: the dtype policy in force, for the message (default: the global one).
        allow_float_ids: train anyway (the user knows the ids stay small).

    Example:
        >>> import keras
        >>> ids = keras.Input(shape=(2,))   # token ids declared float32
        >>> x = keras.layers.Lambda(lambda t: t, name="identity")(ids)   # casts to its dtype
        >>> model = keras.Model(ids, keras.layers.Embedding(20000, 32, name="tokens")(x))
        >>> [f["cast_dtype"] for f in check_before_training(model)]  # float32 now: no error
        ['float32']
    """
    findings = float_ids(model)
    unsafe = [f for f in findings if _rounds_now(f)]
    if unsafe:
        policy = policy_name or _global_policy()
        problems = [_describe(f, policy) for f in unsafe]
        if not allow_float_ids:
            raise UnsafeMixedPrecision(problems, unsafe)
        _log.warning("accelkit: %s", " ".join(problems))
    return findings


def check_first_batch(
    batch_inputs: Any, model: Any, policy_name: str | None = None, *, allow_float_ids: bool = False
) -> dict[str, Any] | None:
    """At the first batch: `ids_exceed_float16`, for ``facts["ids_over_float16"]``.

    Raises `UnsafeMixedPrecision` when the batch's ids are being rounded now (the casting
    layer computes in 16 bits). A functional model with such inputs has already raised in
    `check_before_training`; this catches subclassed models, whose graph is unknown until
    data arrives. ``allow_float_ids=True`` logs a warning instead.

    Example:
        >>> import keras
        >>> ids = keras.Input(shape=(2,))   # token ids declared float32
        >>> x = keras.layers.Lambda(lambda t: t, name="identity")(ids)   # casts to its dtype
        >>> model = keras.Model(ids, keras.layers.Embedding(20000, 32, name="tokens")(x))
        >>> import numpy as np
        >>> check_first_batch(np.array([[12345.0, 7.0]]), model)["changed"]
        1
    """
    found = ids_exceed_float16(batch_inputs, model)
    if found and found["changed"] and float_formats.is_half(found["cast_dtype"]):
        problem = _describe_batch(found, policy_name or _global_policy())
        if not allow_float_ids:
            raise UnsafeMixedPrecision([problem], [found])
        _log.warning("accelkit: %s", problem)
    return found


# -- the first batch -----------------------------------------------------------------------


def _ids_exceed(x: Any, model: Any) -> dict[str, Any] | None:
    import numpy as np

    graph = bool(_id_paths.symbolic(model, "inputs"))
    if graph:
        casts = {f["input"]: (f["cast_by"], f["cast_dtype"]) for f in float_ids(model)}
    else:
        named = _named_inputs(x, model)
        # Whole-number floats beside integer inputs are features (a year, a count): the
        # model's ids come in as those integers, which Keras never autocasts.
        integers = any(_kind(np, value) in ("i", "u") for _, value in named)
        cast = None if integers else _model_cast(model)
        casts = {name: cast for name, _ in named} if cast else {}
    worst: dict[str, Any] | None = None
    for name, value in _named_inputs(x, model):
        cast = casts.get(name)
        if cast is None:
            continue
        array = _array(np, value)
        if array is None or array.size == 0 or array.dtype.kind not in "iuf":
            continue
        if array.dtype.kind == "f" and not (
            np.all(np.isfinite(array)) and np.array_equal(array, np.round(array))
        ):
            continue  # not whole numbers: features, not ids
        if array.dtype.kind != "f" and not graph:
            continue  # integers reach a subclassed model as integers: never autocast
        dtype = cast[1] if float_formats.is_half(cast[1]) else "float16"
        top = int(np.max(np.abs(array)))
        limit = float_formats.exact_limit(dtype) or 0
        if top <= limit or (worst is not None and top <= worst["max_id"]):
            continue
        values, counts = np.unique(np.abs(array).astype(np.int64), return_counts=True)
        lost = [
            (v, int(c))
            for v, c in zip(values.tolist(), counts.tolist(), strict=True)
            if float_formats.rounded(v, dtype) != v
        ]
        changed = sum(c for _, c in lost)
        shown = lost[-1][0] if lost else top  # a value that does change, the largest
        worst = {
            "input": name,
            "dtype": str(array.dtype),
            "max_id": top,
            "values": int(array.size),
            "changed": changed,
            "rounded_in": dtype,
            "exact_up_to": limit,
            "example": [shown, float_formats.rounded(shown, dtype)],
            "cast_by": cast[0],
            "cast_dtype": cast[1],
        }
    return worst


def _model_cast(model: Any) -> tuple[str, str] | None:
    """A subclassed model casts its float inputs to its compute dtype (Keras' autocast)."""
    import keras

    autocasts = (
        getattr(model, "autocast", False)
        and getattr(model, "_convert_input_args", True)
        and _id_paths.is_float(getattr(model, "compute_dtype", None))
    )
    lookups = _id_paths.lookups(keras)
    if not autocasts or not any(
        isinstance(layer, lookups)
        for layer in model._flatten_layers(include_self=False, recursive=True)
    ):
        return None
    return model.name, str(model.compute_dtype)


def _named_inputs(x: Any, model: Any) -> list[tuple[str, Any]]:
    tensors = _id_paths.symbolic(model, "inputs") or []
    names = [_id_paths.producer(t)[0].name for t in tensors]
    if isinstance(x, Mapping):
        struct = getattr(model, "_inputs_struct", None)
        by_key = (
            {key: _id_paths.producer(t)[0].name for key, t in struct.items()}
            if isinstance(struct, Mapping)
            else {}
        )
        return [(by_key.get(key, str(key)), value) for key, value in x.items()]
    if isinstance(x, (list, tuple)):
        return [(names[i] if i < len(names) else f"x[{i}]", v) for i, v in enumerate(x)]
    return [(names[0] if names else "x", x)]


def _kind(np: Any, value: Any) -> str:
    """The numpy kind of a batch input ('i', 'f'...; '' when unreadable)."""
    array = _array(np, value)
    return "" if array is None else str(array.dtype.kind)


def _array(np: Any, value: Any) -> Any:
    values = getattr(value, "values", None)  # a PerReplica value: the first replica's part
    if isinstance(values, tuple) and values:
        value = values[0]
    if hasattr(value, "numpy"):
        value = value.numpy()
    try:
        return np.asarray(value)
    except Exception:  # noqa: BLE001 - ragged, sparse, strings: not ids we can read
        return None


# -- messages ----------------------------------------------------------------------------


def _rounds_now(finding: Mapping[str, Any]) -> bool:
    dtype = finding.get("cast_dtype")
    if not float_formats.is_half(dtype):
        return False
    vocabulary = finding.get("input_dim")
    return vocabulary is None or vocabulary - 1 > (float_formats.exact_limit(dtype) or 0)


def _global_policy() -> str:
    import keras

    return keras.mixed_precision.global_policy().name


def _describe(finding: Mapping[str, Any], policy: str) -> str:
    """One finding as a sentence with the fix (the error's message, the log's warning)."""
    dtype = str(finding.get("cast_dtype"))
    vocabulary = finding.get("input_dim")
    limit = float_formats.exact_limit(dtype)
    lost = ""
    if vocabulary:
        shown = ", ".join(
            _example(v, r, vocabulary) for v, r in float_formats.examples(vocabulary, dtype)
        )
        lost = (
            f": {float_formats.changed_below(vocabulary, dtype)} of its {vocabulary} ids "
            f"become other ids ({shown})"
        )
    shape = tuple(finding.get("input_shape") or ())
    return (
        f"Token ids from input '{finding.get('input')}' ({finding.get('input_dtype')}) "
        f"reach '{finding.get('embedding')}' in layer '{finding.get('layer')}', and "
        f"'{finding.get('cast_by')}' casts them to {dtype} under the {policy} policy, "
        f"which holds integers exactly only up to {limit}{lost}. Declare the ids "
        f'integer: keras.Input(shape={shape!r}, dtype="int32") '
        "(integer inputs are never autocast)."
    )


def _describe_batch(found: Mapping[str, Any], policy: str) -> str:
    return (
        f"The first batch feeds whole numbers up to {found['max_id']} to input "
        f"'{found['input']}' ({found['dtype']}), and '{found['cast_by']}' casts them to "
        f"{found['rounded_in']} under the {policy} policy, which holds integers exactly "
        f"only up to {found['exact_up_to']}: {found['changed']} of the batch's "
        f"{found['values']} values change ({found['example'][0]} -> "
        f"{found['example'][1]:.0f}). If they are token ids, keep them integer: an "
        'int32 array or tensor, and keras.Input(..., dtype="int32") in a functional '
        "model (integer inputs are never autocast)."
    )


def _dtypes(findings: list[dict[str, Any]]) -> str:
    return " and ".join(sorted({str(f.get("rounded_in") or f.get("cast_dtype")) for f in findings}))


def _example(value: int, result: float, vocabulary: int) -> str:
    beyond = " [out of range]" if result >= vocabulary else ""
    return f"{value} -> {result:.0f}{beyond}"
