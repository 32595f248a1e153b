"""What DistributedDataParallel's own work costs a training step, and which of its
options take it away, measured in one process against the same model without DDP.

DDP does work of its own every step, whatever the link: before each forward it
broadcasts rank 0's buffers (BatchNorm's running statistics: ``broadcast_buffers``),
in the backward it copies each gradient into its all-reduce bucket and, after the
all-reduce, back (unless ``gradient_as_bucket_view``), and it keeps per-step
bookkeeping of which parameters were used (unless ``static_graph``). A step that is
bound by the host launching kernels (ResNet-50 at 64 per GPU on an H200) pays for
each of those kernels in full. Variants, each its own copy of the model with its own
fused AdamW, trained in paired rounds (benchmarks/paired.py):

- `module`: no DDP (the reference: the single-GPU step of a scaling efficiency);
- `ddp`: DDP's defaults (plain DDP);
- `bucket_view`: ``gradient_as_bucket_view=True`` (accelkit.torch.fit's default);
- `no_broadcast`: ``broadcast_buffers=False``;
- `static`: ``static_graph=True``;
- `view_no_broadcast`, `view_static`: bucket views with one of the other two;
- `all`: the three options together.

``--variants`` picks some (`module` is always run: the reference); ``--compile`` runs
each through `torch.compile` (DDP's graphs split at its buckets by dynamo's
DDPOptimizer), where fewer, fused kernels leave less host work per step.

With one rank the all-reduce is a copy, so what separates `ddp` from `module` is DDP's
own cost; with several, the all-reduce adds to it.

    PYTHONPATH=src torchrun --nproc-per-node 1 --standalone benchmarks/ddp_cost.py \\
        --model resnet50 --batch-size 64 --steps 30 --repeats 12 --out ddp_cost.json

The table gives each variant's median step and, round by round, its step over the
`module`'s and over plain `ddp`'s (median, min-max): a host-bound step on a shared
machine drifts between rounds by more than the options change it, and the paired
ratios take the drift out.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import paired
from gpu_compare import write_json

OPTIONS: dict[str, dict[str, Any]] = {
    "ddp": {},
    "bucket_view": {"gradient_as_bucket_view": True},
    "no_broadcast": {"broadcast_buffers": False},
    "static": {"static_graph": True},
    "view_no_broadcast": {"gradient_as_bucket_view": True, "broadcast_buffers": False},
    "view_static": {"gradient_as_bucket_view": True, "static_graph": True},
    "all": {"gradient_as_bucket_view": True, "broadcast_buffers": False, "static_graph": True},
}
VARIANTS = ("module", *OPTIONS)


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50", help="mlp, cnn, gpt, gpt2, resnet50")
    parser.add_argument("--batch-size", type=int, default=None, help="per GPU")
    parser.add_argument("--steps", type=int, default=50, help="steps per round")
    parser.add_argument("--repeats", type=int, default=5, help="paired rounds")
    parser.add_argument(
        "--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS), help="module first"
    )
    parser.add_argument("--compile", action="store_true", help="torch.compile every variant")
    parser.add_argument("--out", help="write the result as JSON (rank 0)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    import torch
    import torch.distributed as dist

    # fit's settings: cuDNN benchmark mode, channels-last for a conv net
    run = paired.set_up(args.model, args.batch_size, channels_last=None, cudnn_benchmark=True)
    model = run.model
    variants = ["module", *(name for name in args.variants if name != "module")]
    models = {"module": model}
    for name in variants[1:]:
        models[name] = torch.nn.parallel.DistributedDataParallel(
            copy.deepcopy(model), **run.ddp_devices, **OPTIONS[name]
        )

    def step_of(trained: Any) -> Callable[[], None]:
        optimizer = torch.optim.AdamW(trained.parameters(), lr=1e-4, fused=run.cuda)
        if args.compile:  # DDP's graphs split at its buckets (dynamo's DDPOptimizer)
            trained = torch.compile(trained)
        return run.step(trained, optimizer)

    steps_of = {name: step_of(models[name]) for name in variants}
    paired.rounds(steps_of, 5, 1, run.sync)  # warm-up: cuDNN's search, NCCL, buckets
    times = paired.rounds(steps_of, args.steps, args.repeats, run.sync)
    medians = paired.medians(times)
    result = {
        "model": args.model,
        "batch_size": int(run.inputs.shape[0]),
        "channels_last": run.channels_last,
        "compiled": args.compile,
        "device": run.label,
        "world_size": dist.get_world_size(),
        "backend": dist.get_backend(),
        "steps": args.steps,
        "repeats": args.repeats,
        "options": OPTIONS,
        "step_s": times,
        "median_step_s": medians,
        "ratio_to_module": {name: medians[name] / medians["module"] for name in variants},
        # per paired round, (median, min, max): the figures the docs quote
        "paired_to_module": {
            k: paired.summary(v) for k, v in paired.ratios(times, "module").items()
        },
        "paired_to_ddp": (
            {k: paired.summary(v) for k, v in paired.ratios(times, "ddp").items()}
            if "ddp" in times
            else None
        ),
        "buffers": sum(1 for _ in model.buffers()),
        "parameters": sum(1 for _ in model.parameters()),
        "versions": {"torch": torch.__version__},
    }
    dist.destroy_process_group()
    if int(os.environ.get("RANK", "0")) != 0:
        return 0
    print(
        f"{args.model}, batch {result['batch_size']} per device, {result['world_size']} "
        f"ranks ({result['backend']}), {result['parameters']} parameters, "
        f"{result['buffers']} buffers; median of {args.repeats} rounds of {args.steps} steps:"
    )
    print(f"  {'variant':17s} {'ms/step':>9s} (rounds' range)    per round: x module, x ddp")
    for name in variants:
        spread = f"{min(times[name]) * 1e3:.2f}-{max(times[name]) * 1e3:.2f}"
        module = result["paired_to_module"][name]
        line = (
            f"  {name:17s} {medians[name] * 1e3:9.3f} ({spread:>11s})  "
            f"x{module[0]:.3f} ({module[1]:.2f}-{module[2]:.2f})"
        )
        if result["paired_to_ddp"]:
            ddp = result["paired_to_ddp"][name]
            line += f", x{ddp[0]:.3f} ({ddp[1]:.2f}-{ddp[2]:.2f})"
        print(line)
    write_json(args.out, result)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
