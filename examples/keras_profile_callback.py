"""Measure your own Keras `model.fit` with `accelkit.keras.ProfileCallback`.

Shows: a Keras script kept as it is (a small Transformer text classifier fed by
a `tf.data` pipeline, its own `model.compile` and `model.fit`) with one callback
added. `ProfileCallback` measures the fit (samples/s, tokens/s from the integer
token ids, FLOPs per step, MFU, input wait) and adds each epoch's figures to
Keras' `logs` (`accelkit_samples_per_second`, ...), so `History`, `CSVLogger`
and `TensorBoard` record them: put it before those in the list. Token ids are
declared `int32` and the classifier's output `float32`, the two things mixed
precision gets wrong silently otherwise (the callback checks both).

Run on a GPU:

    python examples/keras_profile_callback.py --epochs 3 --csv text_log.csv

Smoke test (tiny sizes, fine on a CPU):

    python examples/keras_profile_callback.py --smoke
"""

from __future__ import annotations

import argparse

import keras
import numpy as np
import tensorflow as tf

import accelkit


def text_classifier(vocab: int, length: int, dim: int, heads: int, classes: int) -> keras.Model:
    """Token and position embeddings, one Transformer encoder block, mean pooling."""
    ids = keras.Input(shape=(length,), dtype="int32", name="token_ids")  # int32: exact ids
    positions = keras.ops.arange(length)
    x = keras.layers.Embedding(vocab, dim)(ids) + keras.layers.Embedding(length, dim)(positions)
    attended = keras.layers.MultiHeadAttention(heads, dim // heads)(x, x)
    x = keras.layers.LayerNormalization()(x + attended)
    hidden = keras.layers.Dense(4 * dim, activation="gelu")(x)
    x = keras.layers.LayerNormalization()(x + keras.layers.Dense(dim)(hidden))
    x = keras.layers.GlobalAveragePooling1D()(x)
    # float32 logits under a mixed policy (TensorFlow's mixed-precision guide).
    logits = keras.layers.Dense(classes, dtype="float32", name="logits")(x)
    return keras.Model(ids, logits, name="text_classifier")


def reviews(samples: int, vocab: int, length: int, batch: int) -> tf.data.Dataset:
    """Random token ids with labels, batched and prefetched as a real pipeline would be."""
    rng = np.random.default_rng(0)
    ids = rng.integers(1, vocab, (samples, length), dtype=np.int32)
    labels = rng.integers(0, 2, samples)
    data = tf.data.Dataset.from_tensor_slices((ids, labels))
    return data.shuffle(samples).batch(batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--csv", help="also log every epoch, accelkit's figures included, here")
    args = parser.parse_args()
    # vocabulary, sequence length, width, heads, samples, batch, steps per window
    vocab, length, dim, heads, samples, batch, window = 32_000, 256, 256, 4, 50_000, 128, 50
    if args.smoke:
        vocab, length, dim, heads, samples, batch, window = 512, 16, 32, 2, 256, 32, 2
        args.epochs = 2

    accelkit.auto_configure()  # before the model is built, so its layers take the policy
    model = text_classifier(vocab, length, dim, heads, classes=2)
    model.compile(
        optimizer=keras.optimizers.AdamW(3e-4),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    profile = accelkit.keras.ProfileCallback(window=window)  # figures in logs every epoch
    callbacks = [profile]
    if args.csv:
        callbacks.append(keras.callbacks.CSVLogger(args.csv))  # after ProfileCallback
    history = model.fit(
        reviews(samples, vocab, length, batch), epochs=args.epochs, callbacks=callbacks, verbose=2
    )

    print(profile.report)
    for epoch, rate in enumerate(history.history.get("accelkit_samples_per_second", []), 1):
        print(f"epoch {epoch}: {rate:,.1f} samples/s")


if __name__ == "__main__":
    main()
