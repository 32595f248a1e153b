"""What each remaining lever does to a compiled training step, and where its GPU idles.

The step is `step_breakdown.py`'s (forward and loss under one `torch.compile`, bf16
autocast, fused AdamW), on the built-in GPT-2 small at batch 32 unless told otherwise:
the 50% MFU target of issue 24. Each lever runs in its own process, so no compiled code
or setting leaks into the next, and is timed against the base step run the same way:

- ``base``: the step as tune keeps it without CUDA graphs;
- ``graphs``: ``mode="reduce-overhead"`` (CUDA graphs);
- ``coordinate-descent``: inductor's ``coordinate_descent_tuning`` (its kernels' block
  sizes searched);
- ``combo-kernels``: inductor's ``combo_kernels`` (independent kernels launched as one);
- ``compiled-optimizer``: AdamW (foreach) with ``optimizer.step`` compiled by inductor;
- ``sdpa-flash``, ``sdpa-efficient``, ``sdpa-cudnn``: one scaled-dot-product attention
  backend on its own (the others switched off);
- ``bf16-params`` (a diagnosis, not a lever: it changes what is computed): the model's
  parameters in bf16, so the residual stream, the norms and the optimizer move half the
  bytes. It measures what the step's float32 traffic costs.

``--profile`` profiles the base step (3 steps): its kernels' time by kind, the kernels
that take the most time, and the GPU's idle time between kernels, with the largest gaps
and the kernels on either side of them.

    PYTHONPATH=src python3 benchmarks/step_levers.py --out levers.json
    PYTHONPATH=src python3 benchmarks/step_levers.py --model hf-gpt2 --batch-size 16
    PYTHONPATH=src python3 benchmarks/step_levers.py --smoke   # the CPU: the script's check
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import gpu_compare  # same folder: JSON helper
import models_people_train as models
import step_breakdown

LEVERS = (
    "base",
    "graphs",
    "coordinate-descent",
    "combo-kernels",
    "compiled-optimizer",
    "sdpa-flash",
    "sdpa-efficient",
    "sdpa-cudnn",
    "bf16-params",
)
SDPA = {"sdpa-flash": "flash", "sdpa-efficient": "mem_efficient", "sdpa-cudnn": "cudnn"}


def _configure(torch: Any, lever: str) -> None:
    """The process-wide settings a lever changes, before anything compiles."""
    import torch._inductor.config as inductor

    if lever == "coordinate-descent":
        inductor.coordinate_descent_tuning = True
    if lever == "combo-kernels":
        inductor.combo_kernels = True
    if lever in SDPA:
        for backend in SDPA.values():
            getattr(torch.backends.cuda, f"enable_{backend}_sdp")(backend == SDPA[lever])


def _step(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """(the step with `args.lever` applied, the device, the step's model FLOPs)."""
    import torch

    from accelkit.profiling.flops_torch import count_train_step_flops

    _configure(torch, args.lever)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model, batch, loss_fn, _ = models.build(args, device)
    if loss_fn is None:
        flops = count_train_step_flops(model, batch).total
    else:
        flops = count_train_step_flops(model, batch[0], batch[1], loss_fn).total
    if args.lever == "bf16-params":
        model.to(torch.bfloat16)
    cuda = device.type == "cuda"
    if args.lever == "compiled-optimizer":
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        update = torch.compile(optimizer.step)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
        update = optimizer.step
    mode = {"mode": "reduce-overhead"} if args.lever == "graphs" and cuda else {}
    loss_of = torch.compile(lambda b: models.forward_loss(model, b, loss_fn), **mode)

    def step() -> None:
        with torch.autocast(device.type, torch.bfloat16):
            loss = loss_of(batch)
        loss.backward()
        update()
        optimizer.zero_grad(set_to_none=True)

    return step, device, flops


def idle(profile: Any, steps: int, count: int = 10) -> dict[str, Any]:
    """The GPU's idle time between its kernels a step, and the `count` largest gaps with
    the kernels before and after each (``[gap_us, before, after]``)."""
    kernels = sorted(step_breakdown._kernels(profile), key=lambda e: e.time_range.start)
    gaps, end, before = [], None, None
    for event in kernels:
        if end is not None and event.time_range.start > end:
            gaps.append([event.time_range.start - end, before[:80], event.name[:80]])
        if end is None or event.time_range.end > end:
            end, before = event.time_range.end, event.name
    gaps.sort(key=lambda gap: -gap[0])
    return {"idle_ms": sum(gap[0] for gap in gaps) / 1e3 / steps, "largest": gaps[:count]}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """One lever's step, timed (and profiled with ``--profile``), in this process."""
    import torch

    step, device, flops = _step(args)
    seconds = gpu_compare._timed(torch, device, step, args.warmup, args.steps, args.repeats)
    result = {"lever": args.lever, "ms": [s * 1e3 for s in seconds], "flops_per_step": flops}
    if args.profile:
        profiled = 3
        profile = step_breakdown._profile(torch, device, step, profiled)
        result["by_kind_ms"] = step_breakdown._by_kind(profile, device, profiled)
        result["top_kernels_ms"] = step_breakdown._top_kernels(profile, device, profiled, 30)
        result["idle"] = idle(profile, profiled) if device.type == "cuda" else None
    return result


def _child(args: argparse.Namespace, lever: str) -> dict[str, Any]:
    command = [__file__, *gpu_compare.variant_arguments(args, lever)]
    command += ["--smoke"] if args.smoke else []
    command += ["--profile"] if args.profile and lever == "base" else []
    return {"lever": lever, **gpu_compare.run_child(command, args.timeout)}


def compare(args: argparse.Namespace) -> dict[str, Any]:
    import accelkit
    from accelkit.profiling.mfu import peak

    datasheet = peak(accelkit.detect(), "bf16")
    results = [_child(args, lever) for lever in args.levers]
    base = next((r for r in results if r["lever"] == "base" and "ms" in r), None)
    for result in results:
        if "ms" not in result:
            continue
        best = min(result["ms"])
        result["ms_best"], result["ms_spread"] = best, [min(result["ms"]), max(result["ms"])]
        result["vs_base"] = min(base["ms"]) / best if base else None
        if datasheet.tflops:
            result["mfu"] = result["flops_per_step"] / (best / 1e3) / 1e12 / datasheet.tflops
    return {
        "model": args.model,
        "batch_size": args.batch_size,
        "datasheet_peak": {"tflops": datasheet.tflops, "source": datasheet.source},
        "results": results,
    }


def _print(result: dict[str, Any]) -> None:
    print(f"{result['model']} batch {result['batch_size'] or 'default'}")
    print(f"{'lever':<20}{'ms/step':>9}{'spread':>16}{'vs base':>9}{'MFU':>7}")
    for row in result["results"]:
        if "ms" not in row:
            print(f"{row['lever']:<20} failed: {row['error'].splitlines()[-1:]}")
            continue
        spread = "{:.2f}-{:.2f}".format(*row["ms_spread"])
        ratio = f"{row['vs_base']:.3f}x" if row["vs_base"] else "-"
        mfu = f"{row['mfu']:.1%}" if row.get("mfu") is not None else "-"
        print(f"{row['lever']:<20}{row['ms_best']:>9.2f}{spread:>16}{ratio:>9}{mfu:>7}")
    profiled = next((r for r in result["results"] if "top_kernels_ms" in r), None)
    if profiled:
        print(f"\nbase by kind (ms/step): {json.dumps(profiled['by_kind_ms'])}")
        for name, ms in profiled["top_kernels_ms"]:
            print(f"{name[:98]:<100}{ms:>8.3f}")
        if profiled["idle"]:
            print(f"\nGPU idle between kernels: {profiled['idle']['idle_ms']:.2f} ms/step")
            for gap, before, after in profiled["idle"]["largest"]:
                print(f"{gap:>9.1f} us  after {before[:50]}  before {after[:50]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=models.MODELS, default="gpt2")
    parser.add_argument("--batch-size", type=int, default=None, help="gpt2: 32 unless given")
    parser.add_argument("--levers", nargs="+", choices=LEVERS, default=list(LEVERS))
    parser.add_argument(  # one lever, in its own process (gpu_compare.variant_arguments)
        "--variant", dest="lever", choices=LEVERS, help=argparse.SUPPRESS
    )
    parser.add_argument("--profile", action="store_true", help="profile the base step")
    parser.add_argument("--warmup", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--timeout", type=int, default=240, help="seconds per lever")
    parser.add_argument("--smoke", action="store_true", help="tiny model, few steps (the CPU)")
    parser.add_argument("--out", default=None)
    args = step_breakdown.defaults(parser.parse_args(argv))
    if args.lever:
        print(json.dumps(measure(args)))
        return 0
    result = compare(args)
    _print(result)
    gpu_compare.write_json(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
