"""Built-in Keras models and synthetic data for `accelkit bench --framework tensorflow`.

- `mlp`: 3-layer perceptron on 784-feature vectors (MNIST-sized).
- `cnn`: a small convolution net on 32x32x3 images (CIFAR-sized).

Both are built under the global dtype policy in force, with a float32 output head.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

from accelkit.keras import float32_head


def build(name: str, batch_size: int | None, steps: int) -> tuple[Any, Any, Any, int]:
    """(compiled model, x, y, batch size) with `steps` batches of synthetic data."""
    rng = np.random.default_rng(0)
    if name == "mlp":
        batch_size = batch_size or 256
        inputs = keras.Input((784,))
        hidden = keras.layers.Dense(1024, activation="relu")(inputs)
        hidden = keras.layers.Dense(1024, activation="relu")(hidden)
        outputs = keras.layers.Dense(10)(hidden)
        x = rng.normal(size=(batch_size * steps, 784)).astype("float32")
    elif name == "cnn":
        batch_size = batch_size or 128
        inputs = keras.Input((32, 32, 3))
        hidden = inputs
        for width in (32, 64, 128):
            hidden = keras.layers.Conv2D(width, 3, padding="same", activation="relu")(hidden)
            if width > 32:
                hidden = keras.layers.MaxPooling2D()(hidden)
        outputs = keras.layers.Dense(10)(keras.layers.Flatten()(hidden))
        x = rng.normal(size=(batch_size * steps, 32, 32, 3)).astype("float32")
    else:
        raise ValueError(f"model={name!r} is not a built-in Keras model; use one of mlp, cnn")
    model = float32_head(keras.Model(inputs, outputs, name=name))
    model.compile(
        optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    y = rng.integers(0, 10, size=len(x))
    return model, x, y, batch_size
