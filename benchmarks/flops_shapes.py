"""Each step's FLOPs when batch shapes vary, and what counting them costs (issue 37).

A `Meter` loop over Hugging Face GPT-2 whose batches are padded to their longest row
(`DataCollatorWithPadding`'s dynamic padding: every batch its own length, drawn from
`--lengths`), or length-bucketed (`--buckets`: a few lengths, repeated). For each run:
the report's FLOPs per step against the mean of independent counts of the steady steps'
batches (`count_train_step_flops` on each batch whole), how the steps' FLOPs were had
(the report's note: counted, fitted, scaled), and the counting's seconds as a share of
the run. Runs on the CPU or a GPU (the device of `--device`).

    PYTHONPATH=src python3 benchmarks/flops_shapes.py --steps 200 --out flops_shapes.json
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from typing import Any


def batches(kind: str, steps: int, size: int, longest: int, seed: int = 0) -> list[int]:
    """The sequence length of each step's batch."""
    rng = random.Random(seed)
    if kind == "dynamic":
        return [max(rng.randint(8, longest) for _ in range(size)) for _ in range(steps)]
    buckets = [longest // 8, longest // 4, longest // 2, longest]
    return [rng.choice(buckets) for _ in range(steps)]


def run(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    import torch
    import transformers

    from accelkit.profiling.flops_torch import count_train_step_flops
    from accelkit.torch.measuring.meter import Meter

    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=args.layers, n_embd=args.width, n_head=args.heads, n_positions=args.longest
    )
    model = transformers.GPT2LMHeadModel(config).to(args.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    lengths = batches(kind, args.steps, args.batch, args.longest)

    def batch(length: int) -> dict[str, Any]:
        ids = torch.randint(0, config.vocab_size, (args.batch, length), device=args.device)
        return {"input_ids": ids, "labels": ids}

    data = [batch(n) for n in lengths]
    meter = Meter(model, warmup=args.warmup, window=10, sample_gpu=False)
    with meter:
        for item in data:
            with meter.step(item):
                model(**item).loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
    report = meter.report()
    independent = [count_train_step_flops(model, item).total for item in data[args.warmup :]]
    expected = sum(independent) / len(independent)
    note = report.notes.get("flops_per_step", "")
    took = re.search(r"counting took ([\d.e+-]+) s \(([\d.]+)% of the run\)", note)
    return {
        "kind": kind,
        "steps": args.steps,
        "lengths": len(set(lengths)),
        "flops_per_step": report.flops_per_step,
        "independent_mean": expected,
        "ratio": report.flops_per_step / expected if report.flops_per_step else None,
        "first_batch_ratio": count_train_step_flops(model, data[0]).total / expected,
        "counting_s": float(took.group(1)) if took else None,
        "counting_share": float(took.group(2)) / 100 if took else None,
        "run_s": report.run_seconds,
        "note": note,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--longest", type=int, default=256)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    rows = [run(kind, args) for kind in ("dynamic", "buckets")]
    print(f"{'batches':<9} {'lengths':>7} {'ratio':>7} {'first/mean':>10} {'counting':>9}")
    for row in rows:
        share = row["counting_share"]
        print(
            f"{row['kind']:<9} {row['lengths']:>7} {row['ratio']:>7.4f} "
            f"{row['first_batch_ratio']:>10.3f} "
            f"{'-' if share is None else f'{share:.2%}':>9}"
        )
    if args.out:
        with open(args.out, "w") as file:
            json.dump({"args": vars(args), "rows": rows}, file, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
