"""Where a compiled training step's GPU time goes, and what its matmuls could reach.

The step of a model of `models_people_train.py` (the built-in GPT-2 small at batch 32 by
default: the 50% MFU target of issue 24) as `tune` keeps it: forward and loss under one
`torch.compile` (``--mode``: inductor's default, or ``max-autotune-no-cudagraphs``),
bf16 autocast, AdamW fused. It is timed (``--steps`` steps, synchronised at both ends),
then profiled (`torch.profiler`, 3 steps) for

- its kernels' time by kind: matmuls (cuBLAS, CUTLASS, inductor's matmul templates),
  attention (flash and memory-efficient SDPA), inductor's fused kernels, the optimizer,
  copies, the rest; their sum against the wall time is how busy the GPU was;
- each matmul shape (``aten::mm``/``addmm``/``bmm`` as the compiled code calls them):
  its calls a step, its time in the step and the TFLOP/s that makes, beside the same
  shape timed alone on contiguous bf16 tensors (what cuBLAS reaches for it without the
  step around it), and where a dimension is not a multiple of 8 (GPT-2's vocabulary of
  50,257), the same matmul padded to multiples of 64 (what padding would buy).

The floor it prints is the step with every matmul at its isolated speed and the rest as
measured: the MFU no choice of kernels for the other work would pass.

    PYTHONPATH=src python3 benchmarks/step_breakdown.py --out breakdown.json
    PYTHONPATH=src python3 benchmarks/step_breakdown.py --model hf-gpt2 --batch-size 16
    PYTHONPATH=src python3 benchmarks/step_breakdown.py --smoke   # the CPU: the script's check
"""

from __future__ import annotations

import argparse
import collections
import re
import time
from typing import Any

import gpu_compare  # same folder: JSON helper
import models_people_train as models

# The first pattern a kernel's name matches names its kind; inductor's matmul templates
# ("triton_tem_...") before its other kernels ("triton_...").
KINDS = (
    (
        "matmul",
        re.compile(
            r"gemm|cutlass|nvjet|xmma|cublas|triton_tem|^aten::(mm|addmm|bmm)$", re.IGNORECASE
        ),
    ),
    ("attention", re.compile(r"flash|fmha|attention|sdpa", re.IGNORECASE)),
    ("optimizer", re.compile(r"adam|multi_tensor|foreach", re.IGNORECASE)),
    ("fused (inductor)", re.compile(r"^triton_", re.IGNORECASE)),
    ("copy", re.compile(r"memcpy|memset|copy", re.IGNORECASE)),
)
MATMULS = ("aten::mm", "aten::addmm", "aten::bmm")


def kind(name: str) -> str:
    """The kind of a kernel (or, on the CPU, an op) by its name; "other" when none."""
    return next((label for label, pattern in KINDS if pattern.search(name)), "other")


def operands(op: str, shapes: list[list[int]]) -> list[list[int]]:
    """The two matrices of a matmul op from its recorded input shapes: ``addmm``'s bias
    first, scalars empty, an ``out=`` tensor (as inductor calls them) last.

    >>> operands("aten::addmm", [[768], [2048, 256], [256, 768], [], [], [2048, 768]])
    [[2048, 256], [256, 768]]
    """
    tensors = [shape for shape in shapes if shape]
    start = 1 if op == "aten::addmm" else 0
    return tensors[start : start + 2]


def matmul_flops(op: str, shapes: list[list[int]]) -> int | None:
    """2·M·N·K (times the batch for ``bmm``) from an op's recorded input shapes.

    >>> matmul_flops("aten::mm", [[2048, 256], [256, 4096], [2048, 4096]])
    4294967296
    """
    pair = operands(op, shapes)
    if len(pair) < 2:
        return None
    (*batch, m, k), (*_, n) = pair
    count = 2 * m * n * k
    return count * batch[0] if op == "aten::bmm" and batch else count


def _setup(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """(the step, the device, the model FLOPs of one step as accelkit counts them)."""
    import torch

    from accelkit.profiling.flops_torch import count_train_step_flops

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model, batch, loss_fn, _ = models.build(args, device)
    if args.no_mask and isinstance(batch, dict):  # all ones: the same attention without it
        batch = {key: value for key, value in batch.items() if key != "attention_mask"}
    if args.no_dropout:  # a diagnosis, not a lever: what the model's dropout costs
        for module in model.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
        config = getattr(model, "config", None)
        for name in ("attn_pdrop", "resid_pdrop", "embd_pdrop"):
            if hasattr(config, name):
                setattr(config, name, 0.0)
    if loss_fn is None:
        flops = count_train_step_flops(model, batch).total
    else:
        flops = count_train_step_flops(model, batch[0], batch[1], loss_fn).total
    fused = device.type == "cuda"
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=fused)
    options = {} if args.mode == "default" else {"mode": args.mode}
    loss_of = torch.compile(lambda b: models.forward_loss(model, b, loss_fn), **options)

    def step() -> None:
        with torch.autocast(device.type, torch.bfloat16):
            loss = loss_of(batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step, device, flops


def _profile(torch: Any, device: Any, step: Any, steps: int) -> Any:
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities, record_shapes=True) as profile:
        for _ in range(steps):
            step()
        if device.type == "cuda":
            torch.cuda.synchronize()
    return profile


def _kernels(profile: Any) -> list[Any]:
    """The GPU's own events: kernels, copies and sets, without the ranges annotated on
    its timeline (compiled graphs' "## Call CompiledFxGraph ##" spans the kernels it
    launches, and counting it would count them twice)."""
    return [
        event
        for event in profile.events()
        if event.device_type.name == "CUDA" and not getattr(event, "is_user_annotation", False)
    ]


def _by_kind(profile: Any, device: Any, steps: int) -> dict[str, float]:
    """Milliseconds a step by kind: the CUDA kernels' durations on a GPU, the ops' own
    CPU time on the CPU (where there are no kernels)."""
    totals: dict[str, float] = collections.defaultdict(float)
    if device.type == "cuda":
        for event in _kernels(profile):
            totals[kind(event.name)] += event.time_range.elapsed_us() / 1e3 / steps
    else:
        for average in profile.key_averages():
            totals[kind(average.key)] += average.self_cpu_time_total / 1e3 / steps
    return dict(sorted(totals.items(), key=lambda item: -item[1]))


def _top_kernels(profile: Any, device: Any, steps: int, count: int = 15) -> list[list[Any]]:
    """The `count` kernels (ops on the CPU) that take the most time a step: [name, ms]."""
    totals: dict[str, float] = collections.defaultdict(float)
    for event in _kernels(profile) if device.type == "cuda" else profile.events():
        totals[event.name] += event.time_range.elapsed_us() / 1e3 / steps
    ranked = sorted(totals.items(), key=lambda item: -item[1])[:count]
    return [[name[:120], ms] for name, ms in ranked]


def _matmul_shapes(profile: Any, device: Any, steps: int) -> list[dict[str, Any]]:
    rows = []
    for average in profile.key_averages(group_by_input_shape=True):
        if average.key not in MATMULS:
            continue
        shapes = [list(s) for s in average.input_shapes]
        flops = matmul_flops(average.key, shapes)
        total_us = (
            average.device_time_total if device.type == "cuda" else average.self_cpu_time_total
        )
        calls = average.count / steps
        us = total_us / average.count if average.count else 0.0
        rows.append(
            {
                "op": average.key,
                "shapes": shapes,
                "calls_per_step": calls,
                "us_per_call": us,
                "tflops_in_step": flops / us / 1e6 if flops and us else None,
                "flops_per_call": flops,
            }
        )
    return sorted(rows, key=lambda row: -row["calls_per_step"] * row["us_per_call"])


def padded(pair: list[list[int]], multiple: int = 64) -> list[list[int]] | None:
    """The two matrices with their last two dimensions rounded up to `multiple` (as
    inductor's ``shape_padding`` pads a matmul, slicing the result after), or None when
    all are multiples of 8 already (what cuBLAS's fast kernels need).

    >>> padded([[16384, 768], [768, 50257]])
    [[16384, 768], [768, 50304]]
    >>> padded([[16384, 768], [768, 3072]]) is None
    True
    """
    if all(d % 8 == 0 for shape in pair for d in shape[-2:]):
        return None
    up = lambda d: -(-d // multiple) * multiple  # noqa: E731
    return [[*shape[:-2], *(up(d) for d in shape[-2:])] for shape in pair]


def _alone(torch: Any, device: Any, op: str, pair: list[list[int]], repeats: int) -> float | None:
    """Microseconds of a matmul of these two matrices alone on contiguous bf16 tensors."""
    if len(pair) < 2:
        return None
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a, b = (torch.randn(*shape, device=device, dtype=dtype) for shape in pair)
    matmul = torch.bmm if op == "aten::bmm" else torch.mm
    for _ in range(3):
        matmul(a, b)
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        matmul(a, b)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeats * 1e6


def _timed_alone(torch: Any, device: Any, shapes: list[dict[str, Any]], repeats: int) -> float:
    """Each shape's matmul timed alone (``us_alone``, ``tflops_alone`` added to its row);
    the milliseconds a step would save with every matmul at that speed."""
    saved_us = 0.0
    for row in shapes:
        pair = operands(row["op"], row["shapes"])
        alone = _alone(torch, device, row["op"], pair, repeats)
        flops = row["flops_per_call"]
        row["us_alone"], row["tflops_alone"] = (
            alone,
            flops / alone / 1e6 if alone and flops else None,
        )
        bigger = padded(pair)
        row["us_padded"] = bigger and _alone(torch, device, row["op"], bigger, repeats)
        if alone is not None:
            saved_us += row["calls_per_step"] * max(row["us_per_call"] - alone, 0.0)
    return saved_us / 1e3


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    import accelkit
    from accelkit.profiling.mfu import peak

    step, device, flops = _setup(args)
    for _ in range(args.warmup):
        step()
    seconds = gpu_compare._timed(torch, device, step, 0, args.steps, args.repeats)
    wall_ms = min(seconds) * 1e3
    profiled = 3
    profile = _profile(torch, device, step, profiled)
    kinds = _by_kind(profile, device, profiled)
    top = _top_kernels(profile, device, profiled)
    shapes = _matmul_shapes(profile, device, profiled)
    saved_ms = _timed_alone(torch, device, shapes, args.matmul_repeats)
    datasheet = peak(accelkit.detect(), "bf16")
    mfu = (
        (lambda ms: flops / (ms / 1e3) / 1e12 / datasheet.tflops)
        if flops and datasheet.tflops
        else None
    )
    return {
        "model": args.model,
        "batch_size": args.batch_size,
        "mode": args.mode,
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "flops_per_step": flops,
        "datasheet_peak": {"tflops": datasheet.tflops, "source": datasheet.source},
        "wall_ms": wall_ms,
        "wall_ms_repeats": [s * 1e3 for s in seconds],
        "busy_ms": sum(kinds.values()),
        "by_kind_ms": kinds,
        "top_kernels_ms": top,
        "no_mask": args.no_mask,
        "no_dropout": args.no_dropout,
        "matmuls": shapes,
        "floor_ms": wall_ms - saved_ms,
        "mfu": mfu(wall_ms) if mfu else None,
        "mfu_floor": mfu(wall_ms - saved_ms) if mfu else None,
    }


def _print(result: dict[str, Any]) -> None:
    wall = result["wall_ms"]
    print(
        f"{result['model']} batch {result['batch_size'] or 'default'} on {result['device']}, "
        f"compile {result['mode']}: {wall:.2f} ms a step, kernels {result['busy_ms']:.2f} ms "
        f"({result['busy_ms'] / wall:.0%} busy)"
    )
    print(f"{'kind':<20}{'ms/step':>10}{'share':>8}")
    for name, ms in result["by_kind_ms"].items():
        print(f"{name:<20}{ms:>10.2f}{ms / wall:>8.1%}")
    print(f"\n{'kernel':<90}{'ms/step':>10}")
    for name, ms in result["top_kernels_ms"]:
        print(f"{name[:88]:<90}{ms:>10.2f}")
    print(
        f"\n{'op':<12}{'matrices':<30}{'calls':>6}{'us':>9}{'TF/s':>7}{'us alone':>10}{'TF/s':>7}"
        f"{'us padded':>10}"
    )
    for row in result["matmuls"]:
        fmt = lambda v, spec: format(v, spec) if v is not None else "-"  # noqa: E731
        matrices = " @ ".join(
            "x".join(map(str, shape)) for shape in operands(row["op"], row["shapes"])
        )
        print(
            f"{row['op']:<12}{matrices:<30}{row['calls_per_step']:>6.0f}"
            f"{row['us_per_call']:>9.1f}{fmt(row['tflops_in_step'], '.0f'):>7}"
            f"{fmt(row['us_alone'], '.1f'):>10}{fmt(row['tflops_alone'], '.0f'):>7}"
            f"{fmt(row['us_padded'], '.1f'):>10}"
        )
    if result["mfu"] is not None:
        print(
            f"\nMFU {result['mfu']:.1%}; with every matmul at its speed alone "
            f"{result['floor_ms']:.2f} ms, MFU {result['mfu_floor']:.1%}"
        )


def defaults(args: argparse.Namespace) -> argparse.Namespace:
    """`args` with GPT-2's batch of the MFU target (32) unless given, and a smoke run's
    few steps of a few samples (bf16 on a CPU is slow)."""
    if args.batch_size is None and args.model == "gpt2" and not args.smoke:
        args.batch_size = 32
    if args.smoke:
        args.warmup, args.steps, args.repeats = 1, 2, 1
        args.batch_size = args.batch_size or 2
    return args


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=models.MODELS, default="gpt2")
    parser.add_argument("--batch-size", type=int, default=None, help="gpt2: 32 unless given")
    parser.add_argument(
        "--mode", choices=("default", "max-autotune-no-cudagraphs"), default="default"
    )
    parser.add_argument(
        "--no-mask",
        action="store_true",
        help="hf-gpt2: the batch without its all-ones attention_mask",
    )
    parser.add_argument(
        "--no-dropout", action="store_true", help="dropout off (a diagnosis: what it costs)"
    )
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--matmul-repeats", type=int, default=50)
    parser.add_argument("--smoke", action="store_true", help="tiny model, few steps (the CPU)")
    parser.add_argument("--out", default=None)
    args = defaults(parser.parse_args(argv))
    if args.smoke:
        args.matmul_repeats = 2
    result = measure(args)
    _print(result)
    gpu_compare.write_json(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
