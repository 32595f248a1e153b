"""Keras 3's float8 training (`model.quantize("float8")`) against plain mixed_bfloat16.

Issue 36, item 5. Keras 3 trains `Dense` and `EinsumDense` layers in float8 once they are
quantized with mode "float8" (`keras/src/layers/core/dense.py`, `_float8_call`): the
layer's inputs and kernel go through a quantize-dequantize to float8_e4m3fn and the
gradient of its output through one to float8_e5m2, each with a per-tensor scale from an
amax history (delayed scaling), and the matmul itself is written in the compute dtype.
Whether a float8 matrix product runs is up to the compiler: Keras places the
quantize-dequantize next to the matmul for XLA's GEMM rewriter to match (its comment in
`_float8_call`), which on compute capability >= 8.9 can turn it into a cuBLASLt float8 GEMM.
This script measures what `model.fit` gets and counts the GEMMs XLA compiled.

Two variants of one GPT-style decoder (causal `MultiHeadAttention`, a GELU MLP, an untied
LM head whose logits are cast to float32 as `accelkit.keras.float32_head` does), built under
`mixed_bfloat16` from the same seed:

- `bf16`: as built;
- `fp8`: the same model after `model.quantize("float8")` (every `Dense` and the attention's
  `EinsumDense`s; `Embedding` has no float8 mode and stays bfloat16).

Each variant trains in a process of its own (`--child`), so one's compilation, memory and
allocator never touch the other's; the two alternate every round (bf16 first in even rounds,
fp8 first in odd ones) and the fp8 / bf16 ratio is taken per round. A process compiles and
warms up in its first epoch and times the next `--epochs` epochs of `--steps` steps with
`model.fit` (the wall clock between `on_epoch_begin` and `on_epoch_end`, the last loss read
back to the host first, so every step has finished). The data are synthetic and learnable
(the target is the next token id, `(x + 1) % vocabulary`), so the final losses say whether
float8 trained as bf16 did.

Models: `large` (width 2048, 8 blocks, 16 heads, sequence 1024, batch 8, vocabulary 32,000:
0.53 B parameters, 0.47 B of them in matmul kernels) and `small` (width 512, same depth,
sequence and batch: 58 M); `--tiny` swaps in toy sizes to check the script on the CPU.

    KERAS_BACKEND=jax python benchmarks/keras_float8.py --budget-s 215 --out keras_float8.json
    KERAS_BACKEND=tensorflow python benchmarks/keras_float8.py --tiny --rounds 1 --out /tmp/k.json

On the JAX backend each process also reports the GEMMs in the train step XLA compiled
(custom-call targets of the optimized HLO, through `--xla_dump_to`): float8 GEMMs appear as
`__cublas$lt$matmul$f8`. A persistent JAX compilation cache shared by the processes lets later
rounds skip the compile. `--budget-s` stops starting processes once that many seconds have
passed, so a run in a fixed lease ends with whole rounds; the JSON is rewritten after every
process. The H200's figures are in docs/benchmarks.md, "Keras float8 (issue 36)".
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import glob
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

VARIANTS = ("bf16", "fp8")


@dataclasses.dataclass(frozen=True)
class Shape:
    """A decoder's size and its batch."""

    width: int
    blocks: int
    heads: int
    seq: int
    batch: int
    vocab: int

    def flops_per_step(self, matmul_params: int) -> float:
        """Training FLOPs of one step: 6·N·T, plus 12·L·d·S per token for attention.

        PaLM (Chowdhery et al. 2022), appendix B; N counts the matmul kernels only.
        """
        tokens = self.batch * self.seq
        return tokens * (6 * matmul_params + 12 * self.blocks * self.width * self.seq)


MODELS = {
    "large": Shape(width=2048, blocks=8, heads=16, seq=1024, batch=8, vocab=32_000),
    "small": Shape(width=512, blocks=8, heads=8, seq=1024, batch=8, vocab=32_000),
}
TINY = {
    "large": Shape(width=64, blocks=2, heads=4, seq=32, batch=4, vocab=256),
    "small": Shape(width=32, blocks=2, heads=2, seq=32, batch=4, vocab=256),
}


# ---------------------------------------------------------------- the child: one variant


def build_decoder(keras: Any, shape: Shape) -> Any:
    """A pre-norm GPT-style decoder of `Dense`/`EinsumDense` layers under the global policy."""
    layers = keras.layers
    tokens = keras.Input((shape.seq,), dtype="int32")
    hidden = layers.Embedding(shape.vocab, shape.width)(tokens)
    hidden = hidden + layers.Embedding(shape.seq, shape.width)(keras.ops.arange(shape.seq))
    for _ in range(shape.blocks):
        normed = layers.LayerNormalization()(hidden)
        attention = layers.MultiHeadAttention(shape.heads, shape.width // shape.heads)
        hidden = hidden + attention(normed, normed, use_causal_mask=True)
        normed = layers.LayerNormalization()(hidden)
        up = layers.Dense(4 * shape.width, activation="gelu")(normed)
        hidden = hidden + layers.Dense(shape.width)(up)
    logits = layers.Dense(shape.vocab)(layers.LayerNormalization()(hidden))
    logits = layers.Activation("linear", dtype="float32")(logits)  # float32 logits, as float32_head
    return keras.Model(tokens, logits)


def _matmul_params(keras: Any, model: Any) -> int:
    """Parameters of the kernels that multiply: Dense and EinsumDense (embeddings excluded)."""
    kinds = (keras.layers.Dense, keras.layers.EinsumDense)
    return sum(
        _product(layer.kernel.shape)
        for layer in model._flatten_layers()
        if isinstance(layer, kinds)
    )


def _product(values: Any) -> int:
    result = 1
    for value in values:
        result *= int(value)
    return result


def _gemm_kinds(dump_dir: str | None) -> dict[str, int] | None:
    """Custom-call targets and Triton GEMM fusions in the optimized train-step HLO, counted."""
    if not dump_dir:
        return None
    files = glob.glob(os.path.join(dump_dir, "*train_step*after_optimizations.txt"))
    if not files:
        return None  # the step came from the persistent cache: nothing was compiled here
    counts: collections.Counter[str] = collections.Counter()
    for path in files:
        with open(path, encoding="utf-8") as file:
            text = file.read()
        counts.update(re.findall(r'custom_call_target="([^"]+)"', text))
        counts["triton_gemm_fusions"] += len(re.findall(r'"kind":"__triton_gemm"', text))
        counts["f8e4m3fn_tensors"] += text.count("f8e4m3fn[")
        counts["f8e5m2_tensors"] += text.count("f8e5m2[")
    keep = ("cublas", "cudnn", "triton", "f8", "gemm", "matmul")
    return {name: n for name, n in sorted(counts.items()) if any(k in name for k in keep)}


class _EpochClock:
    """Wall seconds of each epoch, the last loss read back first (every step has finished)."""

    def __init__(self, keras: Any) -> None:
        outer = self

        class Clock(keras.callbacks.Callback):
            def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
                outer.started = time.perf_counter()

            def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
                outer.losses.append(float(logs["loss"]))  # waits for the device
                outer.seconds.append(time.perf_counter() - outer.started)

        self.started = 0.0
        self.seconds: list[float] = []
        self.losses: list[float] = []
        self.callback = Clock()


def _peak_bytes() -> int | None:
    try:
        import jax

        stats = jax.devices()[0].memory_stats() or {}
        return stats.get("peak_bytes_in_use")
    except Exception:  # noqa: BLE001 - not on this backend or device
        return None


def run_child(model_name: str, variant: str, args: argparse.Namespace) -> dict[str, Any]:
    """Build, (quantize), compile and fit one variant; its figures as a dict."""
    import warnings

    import keras
    import numpy as np

    shape = (TINY if args.tiny else MODELS)[model_name]
    keras.utils.set_random_seed(0)
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    started = time.perf_counter()
    model = build_decoder(keras, shape)
    quantized: list[str] = []
    if variant == "fp8":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Layer X does not have a `quantize` method"
            model.quantize("float8")
        quantized = [
            type(layer).__name__
            for layer in model._flatten_layers()
            if layer.dtype_policy.quantization_mode == "float8"
        ]
    model.compile(
        optimizer=keras.optimizers.Adam(3e-4),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    rng = np.random.default_rng(0)
    x = rng.integers(0, shape.vocab, size=(shape.batch * args.steps, shape.seq)).astype("int32")
    y = (x + 1) % shape.vocab
    clock = _EpochClock(keras)
    model.fit(
        x,
        y,
        batch_size=shape.batch,
        epochs=1 + args.epochs,
        shuffle=False,
        verbose=0,
        callbacks=[clock.callback],
    )
    timed = clock.seconds[1:]
    step_s = statistics.median(timed) / args.steps
    matmul_params = _matmul_params(keras, model)
    flops = shape.flops_per_step(matmul_params)
    return {
        "model": model_name,
        "variant": variant,
        "device": _device(keras),
        "shape": dataclasses.asdict(shape),
        "parameters": model.count_params(),
        "matmul_parameters": matmul_params,
        "quantized_layers": dict(collections.Counter(quantized)),
        "policy": keras.mixed_precision.global_policy().name,
        "first_epoch_s": clock.seconds[0],
        "epoch_s": timed,
        "step_s": step_s,
        "tokens_per_s": shape.batch * shape.seq / step_s,
        "model_tflops_per_s": flops / step_s / 1e12,
        "losses": clock.losses,
        "final_loss": clock.losses[-1],
        "peak_bytes": _peak_bytes(),
        "process_s": time.perf_counter() - started,
        "gemms": _gemm_kinds(os.environ.get("KERAS_FLOAT8_DUMP_DIR")),
    }


# ---------------------------------------------------------------- the parent: rounds


def _child_env(model_name: str, variant: str, cache_dir: str, dump_root: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="2")
    if os.environ.get("KERAS_BACKEND", "") == "jax":
        dump_dir = os.path.join(dump_root, f"{model_name}_{variant}")
        env.update(
            JAX_COMPILATION_CACHE_DIR=cache_dir,
            JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
            JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0",
            KERAS_FLOAT8_DUMP_DIR=dump_dir,
        )
        flags = f"--xla_dump_to={dump_dir} --xla_dump_hlo_as_text"
        flags += " --xla_dump_hlo_module_re=train_step"  # Keras' jitted train step only
        env["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flags}".strip()
    return env


def _spawn(
    model_name: str, variant: str, args: argparse.Namespace, env: dict[str, str], timeout: float
) -> dict[str, Any]:
    command = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        model_name,
        variant,
        "--steps",
        str(args.steps),
        "--epochs",
        str(args.epochs),
    ]
    if args.tiny:
        command.append("--tiny")
    started = time.perf_counter()
    try:
        done = subprocess.run(
            command, check=False, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {
            "model": model_name,
            "variant": variant,
            "error": f"timed out after {timeout:.0f} s",
        }
    wall = time.perf_counter() - started
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT ") :])
            result["wall_s"] = wall
            return result
    return {
        "model": model_name,
        "variant": variant,
        "wall_s": wall,
        "error": f"exit {done.returncode}: " + done.stderr[-3000:],
    }


def _summary(runs: list[dict[str, Any]], model_name: str) -> dict[str, Any] | None:
    """Per variant: median step and spread; per round: fp8 / bf16; losses."""
    mine = [run for run in runs if run["model"] == model_name and "step_s" in run]
    by_variant = {v: [run for run in mine if run["variant"] == v] for v in VARIANTS}
    if not all(by_variant.values()):
        return None
    rounds = sorted({run["round"] for run in mine})
    ratios = []
    for round_ in rounds:
        pair = {run["variant"]: run["step_s"] for run in mine if run["round"] == round_}
        if len(pair) == 2:
            ratios.append(pair["fp8"] / pair["bf16"])
    out: dict[str, Any] = {"model": model_name, "rounds": len(ratios)}
    for variant, rows in by_variant.items():
        steps = [row["step_s"] for row in rows]
        out[variant] = {
            "step_ms_median": statistics.median(steps) * 1e3,
            "step_ms_min": min(steps) * 1e3,
            "step_ms_max": max(steps) * 1e3,
            "tokens_per_s_median": statistics.median(row["tokens_per_s"] for row in rows),
            "model_tflops_per_s_median": statistics.median(
                row["model_tflops_per_s"] for row in rows
            ),
            "final_loss": [row["final_loss"] for row in rows],
            "peak_gib": max((row["peak_bytes"] or 0) for row in rows) / 2**30,
            "gemms": next((row["gemms"] for row in rows if row.get("gemms")), None),
        }
    if ratios:
        out["fp8_over_bf16"] = {
            "median": statistics.median(ratios),
            "min": min(ratios),
            "max": max(ratios),
            "per_round": ratios,
        }
    return out


def _device(keras: Any) -> str:
    """The accelerator this process trains on, as the backend names it."""
    if keras.config.backend() == "jax":
        import jax

        return str(jax.devices()[0].device_kind)
    return f"CPU ({platform.machine()})"


def _print_table(document: dict[str, Any]) -> None:
    print(
        f"\n{document['device']}, Keras {document['keras']} ({document['backend']}), "
        f"{document['steps']} steps x {document['epochs']} timed epochs per process"
    )
    print(
        f"{'model':<7}{'variant':<8}{'step ms':>9}{'min':>9}{'max':>9}{'tok/s':>11}"
        f"{'TFLOP/s':>9}{'peak GiB':>10}  final loss"
    )
    for summary in document["summaries"]:
        for variant in VARIANTS:
            row = summary[variant]
            losses = " ".join(f"{loss:.3f}" for loss in row["final_loss"])
            print(
                f"{summary['model']:<7}{variant:<8}{row['step_ms_median']:>9.2f}"
                f"{row['step_ms_min']:>9.2f}{row['step_ms_max']:>9.2f}"
                f"{row['tokens_per_s_median']:>11.0f}{row['model_tflops_per_s_median']:>9.1f}"
                f"{row['peak_gib']:>10.1f}  {losses}"
            )
        ratio = summary.get("fp8_over_bf16")
        if ratio:
            print(
                f"{summary['model']:<7}fp8 / bf16 step time: median {ratio['median']:.3f} "
                f"(spread {ratio['min']:.3f} .. {ratio['max']:.3f}, {summary['rounds']} rounds)"
            )
        for variant in VARIANTS:
            if summary[variant]["gemms"]:
                print(f"{summary['model']:<7}{variant} GEMMs compiled: {summary[variant]['gemms']}")
    for run in document["runs"]:
        if "error" in run:
            print(
                f"{run['model']} {run['variant']} round {run.get('round')}: {run['error'][-800:]}"
            )


def _write(document: dict[str, Any], path: str | None) -> None:
    if path:
        with open(path, "w", encoding="utf-8") as file:
            json.dump(document, file, indent=2)


def _run_rounds(args: argparse.Namespace, document: dict[str, Any], scratch: str) -> str | None:
    """Every round's processes into `document`; why it stopped early, or None."""
    started = time.perf_counter()
    cache_dir, dump_root = os.path.join(scratch, "jax_cache"), os.path.join(scratch, "xla_dump")
    last_wall: dict[tuple[str, str], float] = {}
    for round_ in range(args.rounds):
        order = VARIANTS if round_ % 2 == 0 else VARIANTS[::-1]
        for model_name in args.models:
            for variant in order:
                elapsed = time.perf_counter() - started
                left = (args.budget_s - elapsed) if args.budget_s else 3600.0
                expected = last_wall.get(
                    (model_name, variant), max(last_wall.values(), default=0.0)
                )
                if left < max(expected * 1.1, 5.0):
                    return f"budget: {elapsed:.0f} s used, {left:.0f} s left"
                env = _child_env(model_name, variant, cache_dir, dump_root)
                run = _spawn(model_name, variant, args, env, timeout=left)
                run["round"] = round_
                last_wall[(model_name, variant)] = run.get("wall_s", 0.0)
                document["device"] = document["device"] or run.get("device")
                document["runs"].append(run)
                document["summaries"] = [
                    s for s in (_summary(document["runs"], m) for m in args.models) if s
                ]
                _write(document, args.out)  # a run cut short keeps what it measured
                print(
                    f"round {round_} {model_name} {variant}: "
                    + (
                        f"{run['step_s'] * 1e3:.2f} ms/step, loss {run['final_loss']:.3f}, "
                        f"{run['wall_s']:.0f} s"
                        if "step_s" in run
                        else run["error"][-300:]
                    ),
                    flush=True,
                )
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=["large", "small"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30, help="steps per timed epoch")
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs per process")
    parser.add_argument("--tiny", action="store_true", help="toy sizes, to check on the CPU")
    parser.add_argument("--budget-s", type=float, help="start no process after this many seconds")
    parser.add_argument("--child", nargs=2, metavar=("MODEL", "VARIANT"), help=argparse.SUPPRESS)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)

    if args.child:
        model_name, variant = args.child
        print("RESULT " + json.dumps(run_child(model_name, variant, args)))
        return 0

    import keras  # the version only; the children do the work

    started = time.perf_counter()
    document: dict[str, Any] = {
        "device": None,  # the first process's
        "keras": keras.__version__,
        "backend": keras.config.backend(),
        "python": platform.python_version(),
        "steps": args.steps,
        "epochs": args.epochs,
        "tiny": args.tiny,
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "runs": [],
        "summaries": [],
    }
    document["stopped"] = _run_rounds(args, document, tempfile.mkdtemp(prefix="keras_float8_"))
    document["elapsed_s"] = time.perf_counter() - started
    if document["stopped"]:
        print(f"stopped early ({document['stopped']})")
    _write(document, args.out)
    _print_table(document)
    return 0


if __name__ == "__main__":
    sys.exit(main())
