"""What a Keras batch holds, on any backend: its size, its tokens, one replica's share,
and the shape of one of its samples (`KERAS`, for each step's FLOPs)."""

from __future__ import annotations

import functools
from typing import Any

import keras
import numpy as np

from accelkit.profiling.flops_shapes import Sample


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
    first = first_input(x)
    shapes = [v.shape for v in local_values(first)] if first is not None else []
    if not shapes or any(not shape or shape[0] is None for shape in shapes):
        return None, 0
    samples = sum(int(shape[0]) for shape in shapes)
    if tokens_per_sample:
        return samples, samples * tokens_per_sample
    if is_token_ids(local_values(first)[0]):
        if shapes[0][1] is None:  # ragged (or unknown) lengths: count the ids themselves
            return samples, _ragged_tokens(local_values(first))
        return samples, samples * int(shapes[0][1])
    return samples, 0


def first_input(x: Any) -> Any:
    """The first of a batch's inputs (`x` of `keras.utils.unpack_x_y_sample_weight`: a
    tensor, or a tuple, list or dict of them, flattened as Keras flattens them); None
    when there is none."""
    return next(iter(keras.tree.flatten(x)), None)


def is_token_ids(value: Any) -> bool:
    """Whether an input holds token ids: integers of shape (batch, tokens).

    Example:
        >>> import numpy as np
        >>> is_token_ids(np.zeros((8, 128), "int32")), is_token_ids(np.zeros((8, 128)))
        (True, False)
    """
    return len(value.shape) == 2 and _is_integer(value)


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


class KerasBatches:
    """Keras batches as `accelkit.profiling.flops_shapes.ShapeFlops` reads them: ``x``,
    ``(x,)``, ``(x, y)`` or ``(x, y, sample_weight)`` (`keras.utils.unpack_x_y_sample_weight`),
    each a NumPy array or a backend tensor, or a tuple, list or dict of them; one replica's
    batch (`first_replica`). The batch size is the first input's first dimension and the
    sequence length that of its token ids, as `sizes` reads them. A batch holding a ragged
    or sparse value (no dense shape to key a count on) is not read.

    Example:
        >>> import numpy as np
        >>> batch = (np.zeros((8, 16), "int32"), np.zeros((8, 16)), np.ones(8))
        >>> sample, size = KERAS.read(batch)
        >>> sample.shape, sample.length, size
        (((-1, 16), (-1, 16), (-1,)), 16, 8)
        >>> [value.shape for value in KERAS.one_sample(batch, size)]
        [(1, 16), (1, 16), (1,)]
    """

    def read(self, batch: Any) -> tuple[Sample, int] | None:
        x, _, _ = keras.utils.unpack_x_y_sample_weight(batch)
        first = first_input(x)
        values = [value for value in keras.tree.flatten(batch) if hasattr(value, "shape")]
        if first is None or not _dense(first) or not all(_dense(value) for value in values):
            return None
        size = int(first.shape[0]) if len(first.shape) else 0
        if not size:
            return None
        shapes = [tuple(int(d) for d in value.shape) for value in values]
        length = int(first.shape[1]) if is_token_ids(first) else None
        return Sample.of(shapes, size, length), size

    def one_sample(self, batch: Any, size: int) -> Any:
        def cut(value: Any) -> Any:
            if _dense(value) and len(value.shape) and value.shape[0] == size:
                return value[:1]
            return value

        return keras.tree.map_structure(cut, batch)

    def copy(self, batch: Any) -> Any:
        """NumPy arrays copied (a slice is a view of the loader's buffer); tensors kept:
        TensorFlow's and JAX's are immutable."""
        return keras.tree.map_structure(
            lambda value: value.copy() if isinstance(value, np.ndarray) else value, batch
        )


def _dense(value: Any) -> bool:
    """A value with a shape whose every dimension is known: not ragged, not sparse."""
    shape = getattr(value, "shape", None)
    return shape is not None and _dense_type(value.__class__) and None not in tuple(shape)


@functools.cache
def _dense_type(kind: type) -> bool:
    """Not a ragged (`flat_values`) or sparse (`dense_shape`) type: asked once per type,
    as the per-step path reads every batch."""
    return not hasattr(kind, "flat_values") and not hasattr(kind, "dense_shape")


KERAS = KerasBatches()
