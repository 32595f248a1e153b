"""What measuring costs: the same training loop with and without accelkit's meter.

PyTorch: a hand-written loop (the plan's autocast, fused AdamW on CUDA) over a
built-in model, run bare and inside `accelkit.torch.Meter`, alternating, each
variant `--repeats` times in the same process. TensorFlow: `model.fit` against
`accelkit.keras.fit` on the same model and data. Keras (`--framework keras`, on
whichever backend `KERAS_BACKEND` names): `model.fit` bare against `model.fit`
with `accelkit.keras.ProfileCallback`, under the Keras policy accelkit's
TensorFlow plan chooses for this GPU (set by hand: the adapter that applies it
needs TensorFlow); it also records the precision the callback says ran.

    KERAS_BACKEND=jax PYTHONPATH=src python benchmarks/meter_overhead.py --framework keras \
        --model mlp --steps 200 --repeats 5

    PYTHONPATH=src python benchmarks/meter_overhead.py --framework torch --model gpt2 \\
        --steps 60 --repeats 5 --out results/meter_overhead_torch.json

Prints a table and writes JSON: per-variant step times of every repeat, the
median ratio (metered / bare) and its spread.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from typing import Any


def torch_variants(args: argparse.Namespace) -> tuple[Any, Any, dict[str, Any]]:
    import torch

    import accelkit
    from accelkit.bench import torch_models

    plan = accelkit.auto_configure(framework="torch", verbose=False)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model, batch, loss_fn, facts = torch_models.build(args.model, args.batch_size, device)
    model = model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    inputs, targets = batch

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()

    def step() -> None:
        with plan.autocast(device.type):
            loss = loss_fn(model(inputs).float(), targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def bare(steps: int) -> float:
        sync()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        return (time.perf_counter() - start) / steps

    def metered(steps: int) -> float:
        meter = accelkit.torch.Meter(
            model, plan=plan, flops_per_step=1.0, tokens_per_sample=facts.get("tokens_per_sample")
        )
        sync()
        start = time.perf_counter()
        with meter:
            for _ in range(steps):
                with meter.step(batch):
                    step()
        sync()
        return (time.perf_counter() - start) / steps

    for _ in range(3):  # warm-up: autotuning, allocator, fused optimizer
        step()
    info = {
        "device": torch.cuda.get_device_name() if device.type == "cuda" else platform.processor(),
        "torch": torch.__version__,
        "precision": plan.precision.value,
    }
    return bare, metered, info


def keras_variants(args: argparse.Namespace) -> tuple[Any, Any, dict[str, Any]]:
    import keras
    import tensorflow as tf

    import accelkit
    from accelkit.bench import keras_models

    plan = accelkit.auto_configure(framework="tensorflow", verbose=False)
    model, x, y, batch_size = keras_models.build(args.model, args.batch_size, args.steps)
    dataset = (
        tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size).prefetch(tf.data.AUTOTUNE)
    )
    model.fit(dataset.take(3), verbose=0)  # trace the train function once

    def bare(steps: int) -> float:
        start = time.perf_counter()
        model.fit(dataset.take(steps), verbose=0)
        return (time.perf_counter() - start) / steps

    def metered(steps: int) -> float:
        start = time.perf_counter()
        accelkit.keras.fit(model, dataset.take(steps), verbose=0, plan=plan, sample_gpu=True)
        return (time.perf_counter() - start) / steps

    info = {
        "device": platform.processor() or platform.machine(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "precision": plan.precision.value,
    }
    return bare, metered, info


def keras_callback_variants(args: argparse.Namespace) -> tuple[Any, Any, dict[str, Any]]:
    import keras

    import accelkit
    from accelkit.bench import keras_models
    from accelkit.planning.keys import Key

    plan = accelkit.plan_for(_gpu_name(), framework="tensorflow")
    keras.mixed_precision.set_global_policy(plan.value(Key.KERAS_POLICY, "float32"))
    model, x, y, batch_size = keras_models.build(args.model, args.batch_size, args.steps)
    model.fit(
        x[: 3 * batch_size], y[: 3 * batch_size], batch_size=batch_size, verbose=0
    )  # trace / jit the train step once
    seen: dict[str, Any] = {}

    def bare(steps: int) -> float:
        start = time.perf_counter()
        model.fit(
            x[: steps * batch_size], y[: steps * batch_size], batch_size=batch_size, verbose=0
        )
        return (time.perf_counter() - start) / steps

    def metered(steps: int) -> float:
        callback = accelkit.keras.ProfileCallback(plan)
        start = time.perf_counter()
        model.fit(
            x[: steps * batch_size],
            y[: steps * batch_size],
            batch_size=batch_size,
            verbose=0,
            callbacks=[callback],
        )
        elapsed = (time.perf_counter() - start) / steps
        report = callback.report
        seen.update(
            precision_ran=report.precision,
            matmul_dtype=report.matmul_dtype,
            samples_per_second=report.samples_per_second,
            gpu_utilization=report.gpu_utilization,
            notes=report.notes,
        )
        return elapsed

    info = {
        "device": _gpu_name() or platform.machine(),
        "keras": keras.__version__,
        "backend": keras.config.backend(),
        "policy": keras.mixed_precision.global_policy().name,
        "precision": plan.precision.value,
        "callback_report": seen,
    }
    return bare, metered, info


def _gpu_name() -> str | None:
    import accelkit

    gpus = accelkit.detect().gpus
    return gpus[0].name if gpus else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=("torch", "tensorflow", "keras"), default="torch")
    parser.add_argument("--model", default="mlp")
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)

    build = {
        "torch": torch_variants,
        "tensorflow": keras_variants,
        "keras": keras_callback_variants,
    }[args.framework]
    bare, metered, info = build(args)
    times: dict[str, list[float]] = {"bare": [], "metered": []}
    for repeat in range(args.repeats):
        # Alternate the order so drift (clocks, thermals) does not favour one variant.
        order = ("bare", "metered") if repeat % 2 == 0 else ("metered", "bare")
        for name in order:
            times[name].append((bare if name == "bare" else metered)(args.steps))
    ratios = [m / b for b, m in zip(times["bare"], times["metered"], strict=True)]
    result = {
        "benchmark": "meter_overhead",
        "framework": args.framework,
        "model": args.model,
        "steps": args.steps,
        "repeats": args.repeats,
        **info,
        "step_s": times,
        "ratio_median": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "command": " ".join([sys.executable.rsplit("/", 1)[-1], *sys.argv]),
    }
    print(f"{'variant':<10}{'median step (ms)':>18}{'min':>10}{'max':>10}")
    for name, values in times.items():
        print(
            f"{name:<10}{statistics.median(values) * 1e3:>18.3f}"
            f"{min(values) * 1e3:>10.3f}{max(values) * 1e3:>10.3f}"
        )
    print(
        f"metered / bare: median {result['ratio_median']:.4f} "
        f"(spread {result['ratio_min']:.4f} .. {result['ratio_max']:.4f}, "
        f"{args.repeats} paired repeats)"
    )
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
