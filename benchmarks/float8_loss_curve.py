"""float8 against bf16 over a training run (issue 36): does the loss curve stay put?

The Llama-3.2-1B shape of models_people_train.py trains `--steps` steps on tokens drawn
from a fixed random Markov chain, once in bf16 autocast and once with the layers tune's
float8 lever converts (`accelkit.torch.tuning.float8.eligible`: every linear layer but
the head, torchao 0.18 tensorwise) inside the same autocast; each variant in its own
process, from the same initial weights, on the same batches, with AdamW (lr `--lr`,
linear warm-up over the first `--warmup-steps` steps (20), gradients clipped at norm 1).
Both run eagerly: compile changes the kernels, not what float8 computes, and would cost
minutes.

The chain has something to learn and a known floor: `--active` token ids, each followed
by one of `--branches` successors (drawn once, seed 0) with probabilities 0.4, 0.3, 0.2,
0.1, so the best possible loss is the entropy of those, 1.2799 nats. Repeating one batch
would only measure memorisation.

The defaults come from the first H200 run (docs/benchmarks.md): with 8,192 ids and a rate
of 3e-4 the 1B shape learned which ids occur and little of the chain in 300 steps (8.85
nats against ln 8192 = 9.01), and both variants had a one-step loss spike. 1,024 ids
appear eight times each in every 4 x 2048 batch, and 1e-4 suits a batch of 8,192 tokens
(a rate of 3e-4 is set for batches of about a million tokens).

The loss is logged as the Hugging Face Trainer logs it, the mean of each `--log-every`
steps; the table compares float8's logged losses with bf16's after step 20.

`--control` adds a third process, `bf16_nudged`: bf16 again from the same weights each
moved by a relative 2^-12 (its sign drawn with seed 1), 1/16 of bf16's rounding step, so
that the bf16 copies autocast makes differ from the first run's in a few weights by one
rounding. What so small a nudge does to the curve is how far two bf16 runs that differ
by rounding alone drift apart, the scale against which float8's distance from bf16 reads
(both spiked where they left the plateau on an H100, float8's spike 3 steps earlier:
8.2% apart at one logged step). Each comparison gives its first step's loss apart too,
to set the two perturbations side by side (the CPU's tiny model over 300 steps: the nudge
0.04% at step 1 and 0.20% at most after step 20; float8, emulated, 0.20% and 0.34%).

    cd benchmarks && PYTHONPATH=/tmp/site:../src python3 float8_loss_curve.py \\
        --steps 300 --out float8_loss_curve.json
    cd benchmarks && PYTHONPATH=../src python3 float8_loss_curve.py --smoke --out r.json  # CPU
    PYTHONPATH=src python3 benchmarks/float8_loss_curve.py --chart-from r.json --out r.svg
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from typing import Any

import gpu_compare  # same folder: child processes, JSON

VARIANTS = ("bf16", "float8")
CONTROL = "bf16_nudged"  # --control: bf16 from weights moved by one bf16 rounding step
NUDGE = 2.0**-12  # 1/16 of bf16's relative rounding step: a few weights change in bf16
PROBABILITIES = (0.4, 0.3, 0.2, 0.1)
FIRST_COMPARED = 20  # the issue's: the steps of the default warm-up are not compared
ACTIVE = 1024  # the chain's token ids: each appears eight times in a 4 x 2048 batch


def floor_nats() -> float:
    """The chain's entropy per token: the least loss a model can reach on it."""
    return -sum(p * math.log(p) for p in PROBABILITIES)


def markov_tokens(torch: Any, rows: int, length: int, active: int) -> Any:
    """`rows` sequences of `length` token ids below `active` from the fixed chain."""
    generator = torch.Generator().manual_seed(0)
    successors = torch.randint(0, active, (active, len(PROBABILITIES)), generator=generator)
    weights = torch.tensor(PROBABILITIES)
    branch = torch.multinomial(weights, rows * (length - 1), replacement=True, generator=generator)
    branch = branch.view(rows, length - 1)
    tokens = torch.empty(rows, length, dtype=torch.long)
    tokens[:, 0] = torch.randint(0, active, (rows,), generator=generator)
    for t in range(1, length):
        tokens[:, t] = successors[tokens[:, t - 1], branch[:, t - 1]]
    return tokens


def run_variant(args: argparse.Namespace) -> dict[str, Any]:
    import models_people_train as people
    import torch

    from accelkit.torch.tuning import float8

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    args.smoke = args.smoke or device.type != "cuda"
    model, batch, _, facts = people.llama(args, device)
    batch_size, length = batch["input_ids"].shape
    active = min(args.active, model.config.vocab_size)
    tokens = markov_tokens(torch, args.steps * batch_size, length, active)
    converted = 0
    if args.variant == CONTROL:
        nudge(torch, model)
    if args.variant == "float8":
        names = _float8_names(model, args.smoke, float8)
        float8.Float8Layers(model, names, emulate=device.type != "cuda").on()
        converted = len(names)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, fused=device.type == "cuda")
    ramp = args.warmup_steps
    warmup = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / ramp))
    losses = []
    started = time.perf_counter()
    for step in range(args.steps):
        ids = tokens[step * batch_size : (step + 1) * batch_size].to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        warmup.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.detach())
    values = [float(x) for x in torch.stack(losses).cpu()]
    return {
        "variant": args.variant, "config": facts["config"], "batch": [batch_size, length],
        "active_tokens": active, "float8_layers": converted, "losses": values,
        "wall_s": time.perf_counter() - started,
    }  # fmt: skip


def nudge(torch: Any, model: Any) -> None:
    """Move each weight of `model` by `NUDGE` of itself, up or down at random (seed 1):
    the size of one bf16 rounding."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            signs = torch.randint(0, 2, parameter.shape, generator=generator) * 2 - 1
            parameter.mul_(1 + NUDGE * signs.to(parameter.device, parameter.dtype))


def _float8_names(model: Any, smoke: bool, float8: Any) -> tuple[str, ...]:
    """The lever's layers; on the tiny CPU model, none passes the size filter, so every
    linear layer but the head (emulated float8 still runs the same code)."""
    if not smoke:
        return float8.eligible(model).names
    import torch

    head = model.get_output_embeddings()
    return tuple(
        name
        for name, layer in model.named_modules()
        if type(layer) is torch.nn.Linear and layer is not head
    )


def logged(losses: list[float], every: int) -> list[tuple[int, float]]:
    """(last step, mean loss) of each whole interval of `every` steps, steps counted
    from 1 (the HF Trainer's ``logging_steps``)."""
    return [
        (end, statistics.fmean(losses[end - every : end]))
        for end in range(every, len(losses) + 1, every)
    ]


def summarise(results: dict[str, Any], every: int, other: str = "float8") -> dict[str, Any]:
    """`other`'s logged losses against bf16's after `FIRST_COMPARED`: each step's relative
    distance and the largest ({} until both ran)."""
    rows = results["variants"]
    if not all("losses" in rows.get(v, {}) for v in ("bf16", other)):
        return {}
    bf16 = logged(rows["bf16"]["losses"], every)
    fp8 = logged(rows[other]["losses"], every)
    apart = [
        (step, a, b, (b - a) / a) for (step, a), (_, b) in zip(bf16, fp8, strict=True)
        if step > FIRST_COMPARED
    ]  # fmt: skip
    worst = max(apart, key=lambda row: abs(row[3])) if apart else None
    first, then = rows["bf16"]["losses"][0], rows[other]["losses"][0]
    return {
        "first_apart": (then - first) / first,
        "logged": [{"step": s, "bf16": a, other: b, "apart": d} for s, a, b, d in apart],
        "largest_apart": worst[3] if worst else None,
        "largest_apart_step": worst[0] if worst else None,
        "floor_nats": floor_nats(),
    }


def compare(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {
        "steps": args.steps, "log_every": args.log_every, "lr": args.lr,
        "warmup_steps": args.warmup_steps, "variants": {},
    }  # fmt: skip
    for variant in VARIANTS + ((CONTROL,) if args.control else ()):
        command = [__file__, "--variant", variant, *_passed(args)]
        results["variants"][variant] = gpu_compare.run_child(command, args.timeout)
        results["summary"] = summarise(results, args.log_every)
        if args.control:
            results["control"] = summarise(results, args.log_every, CONTROL)
        gpu_compare.write_json(args.out, results)
    return results


def _passed(args: argparse.Namespace) -> list[str]:
    passed = ["--steps", str(args.steps), "--active", str(args.active), "--lr", str(args.lr)]
    passed += ["--warmup-steps", str(args.warmup_steps), "--out", args.out]
    if args.batch_size:
        passed += ["--batch-size", str(args.batch_size)]
    return passed + (["--smoke"] if args.smoke else [])


def show(results: dict[str, Any]) -> None:
    for name, row in results["variants"].items():
        if "losses" not in row:
            print(f"{name:7} failed ({row})")
            continue
        print(
            f"{name:7} {row['config']} batch {row['batch']}, {row['float8_layers']} float8 "
            f"layers, {row['wall_s']:.0f} s, first loss {row['losses'][0]:.3f}, "
            f"last {row['losses'][-1]:.3f}"
        )
    for key, other in (("summary", "float8"), ("control", CONTROL)):
        summary = results.get(key) or {}
        if not summary:
            continue
        print(f"{'step':>5} {'bf16':>8} {other:>11} {'apart':>8}")
        for row in summary["logged"]:
            print(f"{row['step']:5} {row['bf16']:8.4f} {row[other]:11.4f} {row['apart']:8.3%}")
        print(
            f"{other} largest apart after step {FIRST_COMPARED}: {summary['largest_apart']:.3%}"
            f" (step {summary['largest_apart_step']}; at step 1 {summary['first_apart']:.3%});"
            f" floor {summary['floor_nats']:.4f} nats"
        )


def chart(results: dict[str, Any]) -> str:
    """The logged losses of both variants and the chain's floor, as an SVG line chart."""
    from accelkit.report import svg

    every, rows = results["log_every"], results["variants"]
    curves = {
        v: logged(rows[v]["losses"], every)
        for v in (*VARIANTS, CONTROL)
        if "losses" in rows.get(v, {})
    }
    steps = [step for step, _ in curves["bf16"]]
    lines = [(name, [v for _, v in curve]) for name, curve in curves.items()]
    return svg.line_chart(
        "float8-loss", "Loss over steps, bf16 and float8 (mean of each logging interval)",
        steps, [*lines, ("the chain's floor", [floor_nats()] * len(steps))],
        x_label="step", y_label="loss (nats)",
    )  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--active", type=int, default=ACTIVE, help="token ids the chain uses")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument(
        "--warmup-steps", type=int, default=20, help="steps of the learning rate's linear ramp"
    )
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--timeout", type=int, default=200, help="seconds per variant")
    parser.add_argument("--smoke", action="store_true", help="the tiny model (CPU)")
    parser.add_argument("--control", action="store_true", help=f"run {CONTROL} too")
    parser.add_argument("--variant", choices=(*VARIANTS, CONTROL), help=argparse.SUPPRESS)
    parser.add_argument("--chart-from", help="a results JSON: write its chart to --out (SVG)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    args.seq_len = None
    if args.chart_from:
        with open(args.chart_from) as file, open(args.out, "w") as out:
            out.write(chart(json.load(file)) + "\n")
        return 0
    if args.variant:
        print(json.dumps(run_variant(args)))
        return 0
    show(compare(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
