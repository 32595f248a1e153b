"""Tiny Keras models and synthetic data for the Keras tests, and for tests/distributed/tf_worker.py.

Keras is imported inside the functions, so a test module can import these before
`pytest.importorskip("keras")` has decided whether it runs.

    from ..helpers.keras_models import classification_data, global_policy_kept, mlp
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np


def classification_data(
    n: int = 1024, dim: int = 16, classes: int = 4
) -> tuple[np.ndarray, np.ndarray]:
    """`n` float32 samples of `dim` features and their class (the argmax of a fixed random
    linear map to `classes` scores, so a model can learn it), the same on every call.

    Example:
        >>> x, y = classification_data(256)
        >>> x.shape, y.shape, int(y.max()) < 4
        ((256, 16), (256,), True)
    """
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, dim)).astype("float32")
    return x, (x @ rng.normal(size=(dim, classes))).argmax(1)


def mlp(
    dim: int = 16,
    hidden: int = 64,
    classes: int = 4,
    *,
    loss: Any = None,
    metrics: Any = None,
    name: str | None = None,
) -> Any:
    """Dense(hidden, relu) then Dense(classes) logits, seeded, compiled with Adam(1e-2) and
    sparse categorical cross-entropy (or `loss`). Its training step on a batch of B is
    2·B·(dim·hidden + hidden·classes)·2 + 2·B·hidden·classes FLOPs.

    Example:
        >>> mlp(metrics=["accuracy"]).count_params()
        1348
    """
    import keras

    keras.utils.set_random_seed(0)
    inputs = keras.Input((dim,))
    outputs = keras.layers.Dense(classes)(keras.layers.Dense(hidden, activation="relu")(inputs))
    model = keras.Model(inputs, outputs, name=name)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        metrics=metrics,
        loss=loss or keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


@contextlib.contextmanager
def global_policy_kept() -> Iterator[None]:
    """Keras' global dtype policy is put back as it was when the block ends.

    Example:
        >>> with global_policy_kept():
        ...     keras.mixed_precision.set_global_policy("mixed_float16")
    """
    import keras

    policy = keras.mixed_precision.global_policy().name
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(policy)
