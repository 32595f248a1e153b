"""What a Keras batch holds, on any backend: its size, its tokens, one replica's share."""

from __future__ import annotations

from typing import Any

import keras


def sizes(data: Any, tokens_per_sample: int | None = None) -> tuple[int | None, int]:
    """(samples, tokens) of this process's batch: every local replica's share summed
    (under a strategy Keras hands out the global batch split into PerReplica values).

    Tokens: `tokens_per_sample` per sample when given, else the length of an integer
    (batch, tokens) first input (a ragged one: the ids it holds), else 0.

    Example:
        >>> import numpy as np
        >>> sizes((np.zeros((8, 128), "int32"), np.zeros(8)))
        (8, 1024)
    """
    x, _, _ = keras.utils.unpack_x_y_sample_weight(data)
    first = next(iter(keras.tree.flatten(x)), None)
    shapes = [v.shape for v in local_values(first)] if first is not None else []
    if not shapes or any(not shape or shape[0] is None for shape in shapes):
        return None, 0
    samples = sum(int(shape[0]) for shape in shapes)
    if tokens_per_sample:
        return samples, samples * tokens_per_sample
    if len(shapes[0]) == 2 and _is_integer(local_values(first)[0]):
        if shapes[0][1] is None:  # ragged (or unknown) lengths: count the ids themselves
            return samples, _ragged_tokens(local_values(first))
        return samples, samples * int(shapes[0][1])
    return samples, 0


def _ragged_tokens(values: tuple[Any, ...]) -> int:
    """The ids a ragged batch holds (a `tf.RaggedTensor`'s flat values); 0 when unknown."""
    counts: list[Any] = [
        getattr(getattr(v, "flat_values", None), "shape", (None,))[0] for v in values
    ]
    known = [int(c) for c in counts if c is not None]
    return sum(known) if len(known) == len(counts) else 0


def local_values(value: Any) -> tuple[Any, ...]:
    """Each local replica's part of a value (one part when it is not distributed)."""
    values = getattr(value, "values", None)
    return values if isinstance(values, tuple) else (value,)


def first_replica(data: Any) -> Any:
    """A batch as one replica sees it (MirroredStrategy hands out PerReplica values)."""

    def first(value: Any) -> Any:
        values = getattr(value, "values", None)
        return values[0] if isinstance(values, tuple) else value

    return keras.tree.map_structure(first, data)


def _is_integer(value: Any) -> bool:
    return "int" in keras.backend.standardize_dtype(value.dtype)
