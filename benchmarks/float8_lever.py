"""tune's float8 lever on a model people train: ``accelkit.torch.fit(tune=True)`` with
every lever, against the same fit without the float8 lever, each in its own process.

The Llama-3.2-1B shape of models_people_train.py (8 x 2048 tokens, bf16, AdamW; its 3B
shape at 4 x 2048 with ``--model llama-3b``), on fresh batches of token ids from
float8_loss_curve's Markov chain and told of a long run (``--planned``: float8's compile
is priced against the run left, as a real pre-training run would pay it; 10,000 steps
pay float8's 1.8x of the default compile and not max-autotune's 12x, so the variants
differ by the float8 lever alone), trains its trial steps and then ``--repeats`` windows
of ``--steps`` steps with what tune kept. Printed as a table, written as JSON after each
variant (a run cut short keeps what it measured).

    cd benchmarks && PYTHONPATH=../src python3 float8_lever.py --model llama-1b \\
        --out ../float8_lever.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import gpu_compare  # same folder: child processes, JSON
from float8_loss_curve import ACTIVE, markov_tokens  # same folder: the chain with a floor

VARIANTS = ("float8", "without")
MODELS = ("llama-1b", "llama-3b", "gpt2", "hf-gpt2")  # hf-gpt2: Conv1D layers, none converted


def run_variant(args: argparse.Namespace) -> dict[str, Any]:
    import models_people_train as people
    import torch

    import accelkit
    from accelkit.torch.tuning import attention, float8, registry

    if args.variant == "without":  # the benchmark's own switch: every lever but float8
        registry.LEVERS = tuple(e for e in registry.LEVERS if e.candidates is not float8.lever)
    plan = accelkit.auto_configure(framework="torch", verbose=False)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    args.smoke = device.type != "cuda"
    model, batch, loss_fn, facts = people.build(args, device)
    optimizer = people.optimizer_for(torch, model, args.model)
    trial_steps = registry.trial_steps(
        1,
        attention=attention.candidate(model)[0] is not None,
        float8=float8.trial_count(model, device, torch) > 0,
    )
    active = min(model.config.vocab_size, ACTIVE)  # HF's config, or the built-in GPT's
    data = MarkovBatches(
        torch, batch, trial_steps + args.warmup + args.repeats * args.steps, active
    )
    started = time.perf_counter()
    report = accelkit.torch.fit(
        model, iter(data), optimizer, loss_fn, plan=plan, warmup=args.warmup,
        window=args.steps, progress=False, tokens_per_sample=facts.get("tokens_per_sample"),
        tune=True, steps=args.planned,
    )  # fmt: skip
    times = report.series.get("step_time_s", [])[-args.repeats :] or [report.step_time_s]
    return {
        "variant": args.variant,
        "step_s": times,
        "median_step_s": statistics.median(times),
        "mfu": report.mfu,
        "float8_share": report.float8_share,
        "precision_mfu": report.precision_mfu,
        "notes": {k: v for k, v in report.notes.items() if k in ("float8_share", "precision_mfu")},
        "peak_memory_bytes": report.peak_memory_bytes,
        "wall_s": time.perf_counter() - started,
        "losses": report.losses[:5] if hasattr(report, "losses") else None,
        "tuning": report.tuning,
    }


class MarkovBatches:
    """`steps` batches shaped as `batch`, each of fresh token ids from float8_loss_curve's
    Markov chain (`active` ids), already on the batch's device. One batch repeated is learnt
    by heart within tune's trials (the 1B shape's loss fell to 0.0015 on the H200), and a
    step checked against a loss that small fails on its rounding: float8's check then
    read 77% and max-autotune's 19%
    (benchmarks/results/h200_float8_lever_llama-1b_fixed_batch.json)."""

    def __init__(self, torch: Any, batch: Any, steps: int, active: int) -> None:
        self.keyed = isinstance(batch, dict)  # HF's keyword batch, else the built-in GPT's
        ids = batch["input_ids"] if self.keyed else batch[0]
        rows, length = ids.shape
        shifted = 0 if self.keyed else 1  # the built-in GPT's targets: the ids one on
        tokens = markov_tokens(torch, steps * rows, length + shifted, active)
        self.tokens, self.rows, self.steps = tokens.to(ids.device), rows, steps

    def __iter__(self) -> Any:
        for step in range(self.steps):
            ids = self.tokens[step * self.rows : (step + 1) * self.rows]
            yield {"input_ids": ids, "labels": ids} if self.keyed else (ids[:, :-1], ids[:, 1:])

    def __len__(self) -> int:
        return self.steps


def compare(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {"model": args.model, "variants": {}}
    for variant in args.variants:
        command = [__file__, "--variant", variant, *_passed(args)]
        results["variants"][variant] = gpu_compare.run_child(command, args.timeout, cold=True)
        gpu_compare.write_json(args.out, results)
    return results


def _passed(args: argparse.Namespace) -> list[str]:
    passed = [
        "--model", args.model, "--steps", str(args.steps), "--warmup", str(args.warmup),
        "--repeats", str(args.repeats), "--planned", str(args.planned), "--out", args.out,
    ]  # fmt: skip
    return passed + (["--batch-size", str(args.batch_size)] if args.batch_size else [])


def show(results: dict[str, Any]) -> None:
    rows = results["variants"]
    print(f"{'variant':10} {'step ms':>9} {'MFU':>7} {'fp8 share':>9} {'MFU mixed':>9} kept")
    for name, row in rows.items():
        if "median_step_s" not in row:
            print(f"{name:10} failed ({row})")
            continue
        kept = row["tuning"]["chosen"]
        share = row["float8_share"]
        mixed = row["precision_mfu"]
        print(
            f"{name:10} {row['median_step_s'] * 1e3:9.1f} {row['mfu'] or 0:7.1%} "
            f"{share or 0:9.1%} {mixed or 0:9.1%} {kept}"
        )
        for c in row["tuning"]["candidates"]:
            print(f"    {c['name']:32} {c['status']:8} {c.get('why') or ''}")
    if all("median_step_s" in rows.get(v, {}) for v in VARIANTS):
        ratio = rows["without"]["median_step_s"] / rows["float8"]["median_step_s"]
        print(f"float8 lever: {ratio:.3f}x the fit without it")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=MODELS, default="llama-1b")
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--steps", type=int, default=20, help="steps per timed window")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--planned", type=int, default=10_000, help="the run's length told")
    parser.add_argument("--timeout", type=int, default=400, help="seconds per variant")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    if args.variant:
        print(json.dumps(run_variant(args), default=str))
        return 0
    show(compare(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
