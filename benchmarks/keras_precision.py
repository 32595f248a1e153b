"""mixed_bfloat16 against mixed_float16 (and float32) for Keras, on the GPU it runs on.

The measurement behind the planner's Keras policy on compute capability >= 8.0
(DESIGN.md: `mixed_bfloat16` unless it measures more than 3% slower than
`mixed_float16`). Each policy gets its own model, built under that global policy with a
float32 output layer (TensorFlow's mixed-precision guide) and compiled with Adam, so
`mixed_float16` trains with the `LossScaleOptimizer` Keras adds, as users get it. Two
models:

- `cnn`: `keras.applications.ResNet50(weights=None)` on 224x224x3 images, batch 128;
- `transformer`: a GPT-style decoder (6 blocks, width 768, 12 heads, causal attention,
  sequence 512, vocabulary 32,000), batch 16.

The batch lives on the device; each variant trains `--steps` steps per round
(`train_on_batch`, whose logs wait for the device), the variants in an order that
rotates every round, so drift of the machine falls on every variant alike. The ratio
bf16 / fp16 is taken per round; the table shows its median and spread.

    KERAS_BACKEND=jax PYTHONPATH=src python benchmarks/keras_precision.py \\
        --models cnn transformer --steps 30 --rounds 5 --out keras_precision.json

On the H200 image Keras runs on its JAX backend (TensorFlow is not installed there):
XLA compiles the same graph for both policies, so the ratio is the policy's cost.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from typing import Any

POLICIES = ("mixed_bfloat16", "mixed_float16", "float32")


def build_cnn(keras: Any) -> tuple[Any, tuple[int, ...], int, int]:
    """ResNet-50 (no download: random weights), 1,000 classes, float32 softmax head."""
    backbone = keras.applications.ResNet50(
        weights=None, include_top=False, input_shape=(224, 224, 3), pooling="avg"
    )
    logits = keras.layers.Dense(1000, dtype="float32")(backbone.output)
    return keras.Model(backbone.input, logits), (224, 224, 3), 1000, 128


def build_transformer(keras: Any) -> tuple[Any, tuple[int, ...], int, int]:
    """A GPT-style decoder: token and position embeddings, 6 pre-norm blocks, LM head."""
    layers, seq, width, vocab = keras.layers, 512, 768, 32_000
    tokens = keras.Input((seq,), dtype="int32")
    hidden = layers.Embedding(vocab, width)(tokens)
    hidden = hidden + layers.Embedding(seq, width)(keras.ops.arange(seq))
    for _ in range(6):
        normed = layers.LayerNormalization()(hidden)
        attended = layers.MultiHeadAttention(12, width // 12)(normed, normed, use_causal_mask=True)
        hidden = hidden + attended
        normed = layers.LayerNormalization()(hidden)
        hidden = hidden + layers.Dense(width)(layers.Dense(4 * width, activation="gelu")(normed))
    logits = layers.Dense(vocab, dtype="float32")(layers.LayerNormalization()(hidden))
    return keras.Model(tokens, logits), (seq,), vocab, 16


BUILDERS = {"cnn": build_cnn, "transformer": build_transformer}


def variant(
    keras: Any, name: str, policy: str, batch_size: int | None
) -> tuple[Any, Any, Any, dict[str, Any]]:
    """(model, x, y, facts) for one model under one global policy, data on the device."""
    import numpy as np

    keras.mixed_precision.set_global_policy(policy)
    try:
        model, shape, classes, batch = BUILDERS[name](keras)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    batch = batch_size or batch
    model.compile(
        optimizer=keras.optimizers.Adam(1e-4),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    rng = np.random.default_rng(0)
    if name == "transformer":
        x = rng.integers(0, classes, size=(batch, *shape)).astype("int32")
        y = rng.integers(0, classes, size=(batch, *shape)).astype("int32")
    else:
        x = rng.normal(size=(batch, *shape)).astype("float32")
        y = rng.integers(0, classes, size=(batch,)).astype("int32")
    x, y = keras.ops.convert_to_tensor(x), keras.ops.convert_to_tensor(y)
    facts = {
        "batch_size": batch,
        "parameters": model.count_params(),
        "optimizer": type(model.optimizer).__name__,
    }
    return model, x, y, facts


def train(model: Any, x: Any, y: Any, steps: int) -> tuple[float, float]:
    """Seconds per step over `steps` steps, and the last loss."""
    started = time.perf_counter()
    for _ in range(steps):
        loss = model.train_on_batch(x, y)
    return (time.perf_counter() - started) / steps, float(loss)


def measure(keras: Any, name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Every policy on one model: warm-up, then rotating rounds."""
    variants = {policy: variant(keras, name, policy, args.batch_size) for policy in POLICIES}
    warmup = {}
    for policy, (model, x, y, _) in variants.items():
        started = time.perf_counter()
        train(model, x, y, 3)  # compiles
        warmup[policy] = time.perf_counter() - started
    times: dict[str, list[float]] = {policy: [] for policy in POLICIES}
    losses: dict[str, float] = {}
    for round_ in range(args.rounds):
        order = POLICIES[round_ % len(POLICIES) :] + POLICIES[: round_ % len(POLICIES)]
        for policy in order:
            model, x, y, _ = variants[policy]
            step_s, losses[policy] = train(model, x, y, args.steps)
            times[policy].append(step_s)
    ratios = [b / f for b, f in zip(times["mixed_bfloat16"], times["mixed_float16"], strict=True)]
    return {
        "model": name,
        "facts": {policy: facts for policy, (_, _, _, facts) in variants.items()},
        "warmup_s": warmup,
        "step_s": times,
        "last_loss": losses,
        "bf16_over_fp16": {
            "median": statistics.median(ratios),
            "min": min(ratios),
            "max": max(ratios),
            "per_round": ratios,
        },
    }


def _device() -> str:
    try:
        import jax

        return str(jax.devices()[0].device_kind)
    except Exception as exc:  # noqa: BLE001 - a description for the table only
        return f"unknown ({exc})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=sorted(BUILDERS), default=sorted(BUILDERS))
    parser.add_argument("--steps", type=int, default=30, help="steps per variant per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch-size", type=int, help="instead of each model's own batch")
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    import keras

    results = [measure(keras, name, args) for name in args.models]
    document = {
        "device": _device(),
        "keras": keras.__version__,
        "backend": keras.config.backend(),
        "python": platform.python_version(),
        "steps": args.steps,
        "rounds": args.rounds,
        "results": results,
    }
    print(f"{document['device']}, Keras {document['keras']} ({document['backend']})")
    print(f"{'model':<12}{'policy':<16}{'median step (ms)':>18}{'min':>9}{'max':>9}")
    for result in results:
        for policy, values in result["step_s"].items():
            print(
                f"{result['model']:<12}{policy:<16}{statistics.median(values) * 1e3:>18.2f}"
                f"{min(values) * 1e3:>9.2f}{max(values) * 1e3:>9.2f}"
            )
        ratio = result["bf16_over_fp16"]
        print(
            f"{result['model']:<12}bf16 / fp16 step time: median {ratio['median']:.4f} "
            f"(spread {ratio['min']:.4f} .. {ratio['max']:.4f}, {args.rounds} rounds)"
        )
    if args.out:
        with open(args.out, "w", encoding="utf-8") as file:
            json.dump(document, file, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
