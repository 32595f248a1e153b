"""Train a Keras CNN with `accelkit.keras.fit`: `model.fit`, measured.

Shows: `accelkit.auto_configure()` in a Keras script (it sees the `keras`
import and applies the TensorFlow plan: `mixed_float16` on GPUs of compute
capability 7.0 and up, memory growth, TF32, the distribution strategy), a model
built by a function so that `accelkit.keras.fit` can build it inside the plan's
strategy scope (every local GPU through `MirroredStrategy`), the output head
kept in float32, and `model.fit`'s own arguments passed through. The return
value stands in for `model.fit`'s `History` (`report.history["loss"]`) and is
the `RunReport`: samples/s, FLOPs per step, MFU, input wait, advice.

Run on a GPU (MNIST, downloaded by Keras on first use):

    python examples/keras_fit_cnn.py --epochs 5 --save keras_cnn.json

Smoke test (random 28x28 images, tiny sizes, fine on a CPU):

    python examples/keras_fit_cnn.py --smoke
"""

from __future__ import annotations

import argparse

import keras
import numpy as np

import accelkit


def build() -> keras.Model:
    """A small MNIST CNN, compiled: called inside the strategy scope by `accelkit.keras.fit`."""
    inputs = keras.Input(shape=(28, 28, 1))
    x = keras.layers.Rescaling(1 / 255)(inputs)
    for filters in (32, 64):
        x = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False)(x)
        x = keras.layers.BatchNormalization()(x)
        x = keras.layers.ReLU()(x)
        x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    x = keras.layers.Dropout(0.2)(x)
    outputs = keras.layers.Dense(10, activation="softmax")(x)
    # Under mixed_float16 the softmax and the loss stay in float32.
    model = accelkit.keras.float32_head(keras.Model(inputs, outputs, name="mnist_cnn"))
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="random data, tiny sizes")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--save", help="write the run report to this JSON file")
    args = parser.parse_args()

    plan = accelkit.auto_configure()
    if args.smoke:
        rng = np.random.default_rng(0)
        x = rng.integers(0, 256, (256, 28, 28, 1), dtype=np.uint8)
        y = rng.integers(0, 10, 256)
        args.epochs, batch_size, window = 2, 32, 4
    else:
        (x, y), _ = keras.datasets.mnist.load_data()
        x, batch_size, window = x[..., None], 256, 50

    report = accelkit.keras.fit(
        build,  # or a compiled model: it then trains on one device per process
        x,
        y,
        batch_size=batch_size,  # the global batch, split across the replicas
        epochs=args.epochs,
        validation_split=0.1,
        verbose=2,
        window=window,  # steps between device synchronisations
    )
    print(report)
    print(f"policy {plan.precision.value}, {report.world_size} replica(s); by epoch:")
    for epoch, loss, accuracy in zip(
        report.epoch, report.history["loss"], report.history["val_accuracy"], strict=True
    ):
        print(f"  epoch {epoch + 1}: loss {loss:.4f}, validation accuracy {accuracy:.1%}")
    if args.save:
        report.save(args.save)


if __name__ == "__main__":
    main()
