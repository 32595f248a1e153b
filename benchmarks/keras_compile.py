"""What Keras offers for short steps, measured: ``jit_compile`` and ``steps_per_execution``.

Each variant compiles a fresh model (``model.compile(optimizer="adam", ...,
jit_compile=..., steps_per_execution=...)``) and trains it with ``model.fit`` on
in-memory arrays, as a user's script does: one untimed epoch (compilation), then
`--rounds` timed epochs of `--steps` steps, the variants in an order that rotates every
round. The ratio is each variant's samples/s over ``steps_per_execution=1`` with XLA
(``jit``) in the same round. Models with short steps, where the host's per-step work
shows:

- `mlp`: 784 -> 512 -> 512 -> 10, batch 256;
- `cnn`: three 3x3 convolutions (32, 64, 64 channels) on 32x32x3 images, batch 128.

    KERAS_BACKEND=jax PYTHONPATH=src python benchmarks/keras_compile.py --out r.json

On the H200 image Keras runs on JAX, where ``jit_compile=False`` runs the step eagerly,
op by op; on TensorFlow ``jit_compile=True`` asks for XLA where "auto" may not use it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

VARIANTS = {  # name: (jit_compile, steps_per_execution)
    "jit": (True, 1),
    "jit_spe8": (True, 8),
    "jit_spe32": (True, 32),
    "no_jit": (False, 1),
}


def build(keras: Any, name: str) -> tuple[Any, Any, Any]:
    import numpy as np

    rng = np.random.default_rng(0)
    if name == "mlp":
        model = keras.Sequential(
            [
                keras.Input((784,)),
                keras.layers.Dense(512, activation="relu"),
                keras.layers.Dense(512, activation="relu"),
                keras.layers.Dense(10),
            ]
        )
        x = rng.standard_normal((256 * 64, 784), dtype=np.float32)
        return model, x, rng.integers(0, 10, len(x))
    conv = keras.layers.Conv2D
    model = keras.Sequential(
        [
            keras.Input((32, 32, 3)),
            conv(32, 3, activation="relu"),
            conv(64, 3, activation="relu"),
            conv(64, 3, activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(10),
        ]
    )
    x = rng.standard_normal((128 * 64, 32, 32, 3), dtype=np.float32)
    return model, x, rng.integers(0, 10, len(x))


def measure(keras: Any, name: str, variant: str, steps: int) -> tuple[Any, Any]:
    """The compiled model and ``timed() -> samples/s`` for one epoch of `steps` steps."""
    jit, per_call = VARIANTS[variant]
    model, x, y = build(keras, name)
    batch = 256 if name == "mlp" else 128
    model.compile(
        optimizer="adam",
        jit_compile=jit,
        steps_per_execution=per_call,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    x, y = x[: batch * steps], y[: batch * steps]
    model.fit(x, y, batch_size=batch, epochs=1, verbose=0)  # compile, warm up

    def timed() -> float:
        start = time.perf_counter()
        model.fit(x, y, batch_size=batch, epochs=1, verbose=0)  # logs wait for the device
        return len(x) / (time.perf_counter() - start)

    return model, timed


def run(args: argparse.Namespace) -> dict[str, Any]:
    import keras

    results: dict[str, Any] = {"backend": keras.backend.backend(), "keras": keras.__version__}
    for name in args.models:
        timers = {v: measure(keras, name, v, args.steps)[1] for v in args.variants}
        rounds: dict[str, list[float]] = {v: [] for v in args.variants}
        for number in range(args.rounds):
            order = (
                args.variants[number % len(args.variants) :]
                + args.variants[: number % len(args.variants)]
            )
            for variant in order:
                rounds[variant].append(timers[variant]())
        base = rounds.get("jit")
        results[name] = {
            v: {
                "samples_per_s": statistics.median(r),
                "rounds": r,
                "vs_jit": [a / b for a, b in zip(r, base, strict=True)] if base else None,
            }
            for v, r in rounds.items()
        }
    return results


def show(results: dict[str, Any]) -> None:
    print(f"Keras {results['keras']} on {results['backend']}: samples/s (x jit, spe=1)")
    for name, rows in results.items():
        if not isinstance(rows, dict):
            continue
        for variant, row in rows.items():
            ratios = row["vs_jit"] or [1.0]
            print(
                f"{name:<5}{variant:<11}{row['samples_per_s']:>12,.0f}"
                f"{statistics.median(ratios):>8.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=("mlp", "cnn"), default=["mlp", "cnn"])
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--steps", type=int, default=64, help="steps per timed epoch")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    results = run(args)
    show(results)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
