"""accelkit against framework defaults, a hand-tuned loop and Lightning, in one run.

Variants (each in its own process, so no global flag or compile cache leaks
from one to the next; all on the same synthetic batch):

- `defaults`: a plain fp32 loop, PyTorch's defaults (no TF32 for matmuls, no autocast).
- `hand_bf16`: the loop an expert writes: bf16 autocast, TF32, cudnn.benchmark,
  channels-last for conv nets, fused AdamW/SGD.
- `accelkit`: `accelkit.auto_configure()` + `accelkit.torch.fit` (measuring included).
- `accelkit_compile`: the same with `compile=True`.
- `lightning_bf16`: Lightning `Trainer(precision="bf16-mixed")`.

Each variant trains `--steps` steps after `--warmup` steps, `--repeats` times;
throughput is timed with the device synchronised at both ends. MFU is against
the datasheet bf16 peak and against the measured matmul ceiling, with FLOPs per
step from accelkit's counter (checked against 6N+12LTd for GPT-2).

    PYTHONPATH=src python benchmarks/gpu_compare.py --model gpt2 --out results/gpt2.json
    PYTHONPATH=src python benchmarks/gpu_compare.py --model resnet50 --out results/resnet50.json
    PYTHONPATH=src python benchmarks/gpu_compare.py --model gpt --smoke   # CPU check
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

VARIANTS = ("defaults", "hand_bf16", "accelkit", "accelkit_compile", "lightning_bf16")


# -- one variant, in its own process ------------------------------------------------------


def _setup(args: argparse.Namespace) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
    import torch

    from accelkit.bench import torch_models

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    model, batch, loss_fn, facts = torch_models.build(args.model, args.batch_size, device)
    return torch, device, model.to(device), (batch, loss_fn), facts


def _optimizer(torch: Any, model: Any, model_name: str, device: Any) -> Any:
    fused = device.type == "cuda"
    if model_name == "resnet50":
        return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, fused=fused)
    return torch.optim.AdamW(model.parameters(), lr=1e-4, fused=fused)


def _timed(
    torch: Any, device: Any, step: Any, warmup: int, steps: int, repeats: int
) -> list[float]:
    """Seconds per step for each repeat, the device synchronised at both ends."""
    for _ in range(warmup):
        step()
    out = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        out.append((time.perf_counter() - start) / steps)
    return out


def run_plain(args: argparse.Namespace, expert: bool) -> dict[str, Any]:
    torch, device, model, (batch, loss_fn), _ = _setup(args)
    conv = args.model in ("resnet50", "cnn")
    if expert:
        torch.set_float32_matmul_precision("high")
        torch.backends.cudnn.benchmark = True
        if conv:
            model = model.to(memory_format=torch.channels_last)
    inputs, targets = batch
    if expert and conv:
        inputs = inputs.contiguous(memory_format=torch.channels_last)
    optimizer = _optimizer(torch, model, args.model, device)
    autocast_dtype = torch.bfloat16 if expert else None

    def step() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast_dtype is not None):
            loss = loss_fn(model(inputs).float(), targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = _timed(torch, device, step, args.warmup, args.steps, args.repeats)
    return {"step_s": times, "peak_memory_bytes": _peak_memory(torch, device)}


def run_accelkit(args: argparse.Namespace, compile: bool) -> dict[str, Any]:
    import accelkit

    plan = accelkit.auto_configure(framework="torch", compile=compile, verbose=False)
    torch, device, model, (batch, loss_fn), facts = _setup(args)
    from accelkit.bench import torch_models

    optimizer = _optimizer(torch, model, args.model, device)
    times, reports = [], []
    for repeat in range(args.repeats):
        warmup = args.warmup if repeat == 0 else 1  # compilation and autotuning happen once
        loader = torch_models.SyntheticBatches(batch, warmup + args.steps)
        report = accelkit.torch.fit(
            model,
            loader,
            optimizer,
            loss_fn,
            plan=plan,
            tokens_per_sample=facts.get("tokens_per_sample"),
            warmup=warmup,
            window=max(args.steps // 2, 1),
            progress=False,
            compile=compile,
        )
        times.append(report.step_time_s)
        reports.append(report)
    last = reports[-1]
    return {
        "step_s": times,
        "peak_memory_bytes": last.peak_memory_bytes,
        "flops_per_step": last.flops_per_step,
        "mfu_reported": [r.mfu for r in reports],
        "gpu_utilization": last.gpu_utilization,
        "precision": plan.precision.value,
    }


def run_lightning(args: argparse.Namespace) -> dict[str, Any]:
    import lightning as L  # Lightning's convention

    torch, device, model, (batch, loss_fn), _ = _setup(args)
    model_name = args.model

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = model

        def training_step(self, data: Any, index: int) -> Any:
            inputs, targets = data
            return loss_fn(self.net(inputs), targets)

        def configure_optimizers(self) -> Any:
            return _optimizer(torch, self.net, model_name, device)

    class Timer(L.Callback):
        def __init__(self) -> None:
            self.marks: list[float] = []

        def on_train_batch_start(self, trainer: Any, module: Any, data: Any, index: int) -> None:
            if index >= args.warmup and (index - args.warmup) % args.steps == 0:
                torch.cuda.synchronize() if device.type == "cuda" else None
                self.marks.append(time.perf_counter())

        def on_train_end(self, trainer: Any, module: Any) -> None:
            torch.cuda.synchronize() if device.type == "cuda" else None
            self.marks.append(time.perf_counter())

    from accelkit.bench.torch_models import SyntheticBatches

    total = args.warmup + args.steps * args.repeats
    timer = Timer()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    trainer = lightning_trainer(L, device, total, [timer])
    trainer.fit(Module(), train_dataloaders=SyntheticBatches(batch, total))
    marks = timer.marks
    times = [(b - a) / args.steps for a, b in itertools.pairwise(marks)]
    return {"step_s": times[: args.repeats], "peak_memory_bytes": _peak_memory(torch, device)}


def _peak_memory(torch: Any, device: Any) -> int | None:
    return int(torch.cuda.max_memory_allocated()) if device.type == "cuda" else None


def run_variant(args: argparse.Namespace) -> dict[str, Any]:
    name = args.variant
    if name == "defaults":
        return run_plain(args, expert=False)
    if name == "hand_bf16":
        return run_plain(args, expert=True)
    if name in ("accelkit", "accelkit_compile"):
        return run_accelkit(args, compile=name == "accelkit_compile")
    if name == "lightning_bf16":
        return run_lightning(args)
    raise ValueError(f"variant={name!r}; use one of {', '.join(VARIANTS)}")


# -- the comparison -------------------------------------------------------------------------


def _ceiling(args: argparse.Namespace) -> dict[str, Any]:
    from accelkit.profiling.calibrate import matmul_tflops

    calibration = matmul_tflops("bf16")
    return {
        "tflops": calibration.tflops,
        "spread": list(calibration.spread),
        "method": calibration.method,
    }


def _child(args: argparse.Namespace, variant: str) -> dict[str, Any]:
    return run_child([__file__, *variant_arguments(args, variant)], args.timeout)


def variant_arguments(args: argparse.Namespace, variant: str) -> list[str]:
    """The command-line arguments that run `variant` alone in a child process, with the
    comparison's model, steps, warm-up, repeats and batch size."""
    found = ["--variant", variant, "--model", args.model, "--steps", str(args.steps)]
    found += ["--warmup", str(args.warmup), "--repeats", str(args.repeats)]
    if getattr(args, "batch_size", None):
        found += ["--batch-size", str(args.batch_size)]
    return found


def lightning_trainer(L: Any, device: Any, steps: int, callbacks: list[Any]) -> Any:
    """Lightning's Trainer as the comparisons run it: one device, bf16-mixed, `steps`
    steps, nothing written (no logger, checkpoint, progress bar or model summary)."""
    return L.Trainer(
        accelerator="gpu" if device.type == "cuda" else "cpu",
        devices=1,
        precision="bf16-mixed",
        max_steps=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
    )


def run_child(command: list[str], timeout: float, *, cold: bool = False) -> dict[str, Any]:
    """Run a benchmark script's variant in its own Python process (no flag leaks between
    variants); its last stdout line starting with "{" is the result, plus ``process_s``;
    ``{"error": ...}`` when it failed or timed out. `cold`: with an inductor cache of its
    own, empty, unless TORCHINDUCTOR_CACHE_DIR is set: a variant run after another that
    compiled the same graphs compiles them from the disk cache, and tune prices
    max-autotune and float8 by the compile it measures (float8_lever.py's `without`
    variant tried max-autotune after the float8 variant's process, docs/benchmarks.md)."""
    started = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "src")}
    with tempfile.TemporaryDirectory(prefix="inductor-") as cache:
        if cold:
            env.setdefault("TORCHINDUCTOR_CACHE_DIR", cache)
        try:
            done = subprocess.run(
                [sys.executable, *command],
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
                env=env,
            )
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"error": (done.stderr or done.stdout)[-2000:]}
    return {**json.loads(lines[-1]), "process_s": time.perf_counter() - started}


def write_json(path: str | None, result: dict[str, Any]) -> None:
    """The result as JSON at `path` (nothing when None)."""
    if path:
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=2)


def compare(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    import accelkit
    from accelkit.bench import torch_models
    from accelkit.profiling.flops_torch import count_train_step_flops
    from accelkit.profiling.mfu import peak

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model, (inputs, targets), loss_fn, facts = torch_models.build(
        args.model, args.batch_size, device
    )
    flops = count_train_step_flops(model.to(device), inputs, targets, loss_fn).total
    samples = int(inputs.shape[0])
    hardware = accelkit.detect()
    datasheet = peak(hardware, "bf16")
    ceiling = _ceiling(args) if device.type == "cuda" else None
    del model
    variants = [v for v in VARIANTS if v in args.variants]
    results: dict[str, Any] = {}
    for variant in variants:
        results[variant] = _child(args, variant)
        print(
            f"  {variant}: {'error' if 'error' in results[variant] else 'done'}",
            file=sys.stderr,
            flush=True,
        )
    table = []
    base = {k: statistics.median(v["step_s"]) for k, v in results.items() if "step_s" in v}
    for variant, result in results.items():
        if "step_s" not in result:
            table.append({"variant": variant, "error": result.get("error")})
            continue
        step = statistics.median(result["step_s"])
        row = {
            "variant": variant,
            "step_ms_median": step * 1e3,
            "step_ms_spread": [min(result["step_s"]) * 1e3, max(result["step_s"]) * 1e3],
            "samples_per_s": samples / step,
            "tokens_per_s": samples * facts["tokens_per_sample"] / step
            if "tokens_per_sample" in facts
            else None,
            "achieved_tflops": flops / step / 1e12 if flops else None,
            "peak_memory_gb": (result.get("peak_memory_bytes") or 0) / 1e9 or None,
            "vs_defaults": base["defaults"] / step if "defaults" in base else None,
            "vs_lightning": base["lightning_bf16"] / step if "lightning_bf16" in base else None,
        }
        if flops and datasheet.tflops:
            row["mfu_datasheet"] = flops / step / 1e12 / datasheet.tflops
        if flops and ceiling:
            row["mfu_ceiling"] = flops / step / 1e12 / ceiling["tflops"]
        if "mfu_reported" in result:
            row["mfu_reported_by_accelkit"] = result["mfu_reported"]
        table.append(row)
    return {
        "benchmark": "gpu_compare",
        "model": args.model,
        "samples_per_step": samples,
        "steps": args.steps,
        "warmup": args.warmup,
        "repeats": args.repeats,
        "flops_per_step": flops,
        "flops_independent": facts.get("analytic_flops_per_step"),
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "datasheet_peak": {"tflops": datasheet.tflops, "source": datasheet.source},
        "matmul_ceiling": ceiling,
        "rows": table,
        "raw": results,
    }


def _print(result: dict[str, Any]) -> None:
    print(
        f"{result['model']} on {result['device']}, {result['samples_per_step']} samples/step, "
        f"{result['repeats']} repeats x {result['steps']} steps; FLOPs/step "
        f"{result['flops_per_step']:.4e}"
    )
    header = (
        f"{'variant':<18}{'step ms':>9}{'spread':>17}{'samples/s':>11}{'tokens/s':>11}"
        f"{'TFLOP/s':>9}{'MFU ds':>8}{'MFU ceil':>9}{'mem GB':>8}{'x defaults':>11}"
        f"{'x Lightning':>12}"
    )
    print(header)
    for row in result["rows"]:
        if "error" in row:
            print(f"{row['variant']:<18} error: {row['error'][-300:]}")
            continue

        def fmt(value: Any, spec: str) -> str:
            return "-" if value is None else format(value, spec)

        spread = f"{row['step_ms_spread'][0]:.2f}-{row['step_ms_spread'][1]:.2f}"
        print(
            f"{row['variant']:<18}{row['step_ms_median']:>9.2f}{spread:>17}"
            f"{row['samples_per_s']:>11,.1f}{fmt(row['tokens_per_s'], ',.0f'):>11}"
            f"{fmt(row['achieved_tflops'], '.1f'):>9}{fmt(row.get('mfu_datasheet'), '.1%'):>8}"
            f"{fmt(row.get('mfu_ceiling'), '.1%'):>9}{fmt(row['peak_memory_gb'], '.1f'):>8}"
            f"{fmt(row['vs_defaults'], '.2f'):>11}{fmt(row['vs_lightning'], '.3f'):>12}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt2")
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--steps", type=int, default=30, help="timed steps per repeat")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS))
    parser.add_argument("--variant", help=argparse.SUPPRESS)  # internal: run one variant
    parser.add_argument("--timeout", type=int, default=300)
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a tiny CPU run of every variant (checks the script, not speed)",
    )
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    if args.smoke:
        args.steps, args.warmup, args.repeats = 2, 1, 2
        args.batch_size = args.batch_size or 2
    if args.variant:
        print(json.dumps(run_variant(args)))
        return 0
    result = compare(args)
    _print(result)
    write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
