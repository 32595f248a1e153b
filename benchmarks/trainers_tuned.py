"""The trainers people use, with and without accelkit's documented integration (issue 24).

Variants (each in its own process, in paired rounds whose order alternates, ABBA...):

- `hf_bf16`: the Hugging Face `Trainer` with ``TrainingArguments(bf16=True)``;
- `hf_accelkit`: the documented integration: ``TrainingArguments(**accelkit.hf.
  training_arguments(plan))`` and ``callbacks=[accelkit.hf.AccelkitCallback(tune=True)]``;
- `hf_accelkit_no_float8`: the same with tune's float8 lever left out of the registry
  (the benchmark's own switch, in that variant's process): float8's worth in this door;
- `hf_compile`: ``TrainingArguments(bf16=True, torch_compile=True)``, compile by hand;
- `hf_compile_fused`: ``TrainingArguments(bf16=True, torch_compile=True,
  optim="adamw_torch_fused")``: what a user who knows the levers sets by hand (the fused
  AdamW is transformers 5's default already; set here so that the row means the same on
  any version);
- `lightning_bf16`: Lightning ``Trainer(precision="bf16-mixed")``;
- `lightning_compile`: the same Trainer, the network compiled by hand
  (``torch.compile(model)`` inside the LightningModule; the loss and optimizer as
  written), no accelkit;
- `lightning_accelkit`: ``Trainer(**accelkit.lightning.trainer_kwargs(plan),
  callbacks=[accelkit.lightning.AccelkitCallback(tune=True)])``.

``tune=True`` because a benchmark run is too short for ``"auto"`` (which tunes GPU runs
estimated at 10 minutes or more); the trials are inside the untimed warm-up (`--warmup`
steps, more than the trials take: `accelkit.torch.tuning.registry.trial_units`), and
``tune_s`` is what they took. Each variant times `--windows` windows of `--steps`
optimizer steps after the warm-up, the device synchronised at both ends, the trainer's
own data loading and loop included. Ratios are per round (a variant against another
of the same round): ``ratio`` against the first variant, and each accelkit variant
against every other one below the table. `--out` is rewritten after every variant, so
a run cut short keeps what it measured.

    PYTHONPATH=src python3 benchmarks/trainers_tuned.py --model hf-gpt2 \\
        --variants hf_bf16 hf_accelkit --rounds 2 --out r.json
    PYTHONPATH=src python3 benchmarks/trainers_tuned.py --model gpt2 --smoke   # CPU check
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from typing import Any

import gpu_compare  # same folder: child processes, JSON
import models_people_train as models  # same folder: the models, batches and optimizers
from float8_loss_curve import ACTIVE, markov_tokens  # same folder: the chain with a floor

VARIANTS = (
    "hf_bf16",
    "hf_accelkit",
    "hf_accelkit_no_float8",
    "hf_compile",
    "hf_compile_fused",
    "lightning_bf16",
    "lightning_compile",
    "lightning_accelkit",
)


def _device_and_model(args: argparse.Namespace) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model, batch, loss_fn, facts = models.build(args, device)
    return torch, device, model, (batch, loss_fn), facts


def _windows(torch: Any, device: Any, args: argparse.Namespace) -> tuple[list[float], Any]:
    """The timed windows' seconds per step, and ``mark(step)`` to call at each step start
    (and once more after the last step)."""
    marks: dict[int, float] = {}
    edges = {args.warmup + args.steps * w for w in range(args.windows + 1)}

    def mark(step: int) -> None:
        if step in edges:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            marks[step] = time.perf_counter()

    def windows() -> list[float]:
        times = sorted(marks.items())
        return [(b - a) / args.steps for (_, a), (_, b) in itertools.pairwise(times)]

    return windows, mark  # type: ignore[return-value]


def _markov_rows(torch: Any, count: int, length: int, active: int) -> list[dict[str, Any]]:
    """`count` rows of fresh token ids from float8_loss_curve's Markov chain: one batch
    repeated is learnt by heart within tune's trials, and a candidate checked against a
    loss near 0 fails on its rounding (float8_lever.MarkovBatches)."""
    tokens = markov_tokens(torch, count, length, active)
    return [{"input_ids": ids, "labels": ids} for ids in tokens]


def run_hf(args: argparse.Namespace) -> dict[str, Any]:
    import tempfile

    from transformers import Trainer, TrainerCallback, TrainingArguments

    import accelkit
    import accelkit.hf

    torch, device, model, (batch, _), _ = _device_and_model(args)
    total = args.warmup + args.steps * args.windows
    size, length = batch["input_ids"].shape
    rows = _markov_rows(torch, size * total, length, min(model.config.vocab_size, ACTIVE))
    windows, mark = _windows(torch, device, args)

    class Timer(TrainerCallback):
        def on_step_begin(self, a: Any, state: Any, control: Any, **_: Any) -> None:
            mark(state.global_step)

        def on_step_end(self, a: Any, state: Any, control: Any, **_: Any) -> None:
            control.should_training_stop = state.global_step >= total

        def on_train_end(self, a: Any, state: Any, control: Any, **_: Any) -> None:
            mark(state.global_step)

    # --planned: the Trainer told of a longer run (tune prices compiles against it), and
    # stopped by the timer after the timed windows, as an early-stopping callback would.
    common: dict[str, Any] = {
        "output_dir": tempfile.mkdtemp(), "max_steps": max(total, args.planned or 0),
        "disable_tqdm": True,
        "per_device_train_batch_size": size, "report_to": [], "logging_steps": 10**6,
        "save_strategy": "no", "use_cpu": device.type != "cuda",
    }  # fmt: skip
    callbacks: list[Any] = [Timer()]
    if args.variant.startswith("hf_accelkit"):
        if args.variant == "hf_accelkit_no_float8":
            from accelkit.torch.tuning import float8, registry

            registry.LEVERS = tuple(e for e in registry.LEVERS if e.candidates is not float8.lever)
        plan = accelkit.auto_configure(framework="torch", verbose=False)
        arguments = TrainingArguments(**accelkit.hf.training_arguments(plan), **common)
        callbacks.append(accelkit.hf.AccelkitCallback(tune=True))
    else:
        by_hand: dict[str, Any] = {
            "hf_bf16": {},
            "hf_compile": {"torch_compile": True},
            "hf_compile_fused": {"torch_compile": True, "optim": "adamw_torch_fused"},
        }[args.variant]
        arguments = TrainingArguments(bf16=device.type == "cuda", **by_hand, **common)
    trainer = Trainer(model, arguments, train_dataset=rows, callbacks=callbacks)
    trainer.train()
    return _result(torch, device, windows(), callbacks[1:], size, arguments.optim, args.warmup)


def run_lightning(args: argparse.Namespace) -> dict[str, Any]:
    import lightning as L  # Lightning's convention

    import accelkit
    import accelkit.lightning
    from accelkit.bench.torch_models import SyntheticBatches

    torch, device, model, (batch, loss_fn), _ = _device_and_model(args)
    total = args.warmup + args.steps * args.windows
    windows, mark = _windows(torch, device, args)
    name = args.model

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.compile(model) if args.variant == "lightning_compile" else model

        def training_step(self, data: Any, index: int) -> Any:
            return models.forward_loss(self.net, data, loss_fn)

        def configure_optimizers(self) -> Any:
            return models.optimizer_for(torch, self.net, name)

    class Timer(L.Callback):
        def on_train_batch_start(self, trainer: Any, module: Any, data: Any, index: int) -> None:
            mark(index)

        def on_train_end(self, trainer: Any, module: Any) -> None:
            mark(trainer.global_step)

    callbacks: list[Any] = [Timer()]
    if args.variant == "lightning_accelkit":
        plan = accelkit.auto_configure(framework="torch", verbose=False)
        callbacks.append(accelkit.lightning.AccelkitCallback(tune=True))
        trainer = L.Trainer(
            **accelkit.lightning.trainer_kwargs(plan), max_steps=total, logger=False,
            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
            callbacks=callbacks,
        )  # fmt: skip
    else:
        trainer = gpu_compare.lightning_trainer(L, device, total, callbacks)
    trainer.fit(Module(), train_dataloaders=SyntheticBatches(batch, total))
    size = int(next(iter(batch.values())).shape[0]) if isinstance(batch, dict) else len(batch[0])
    return _result(torch, device, windows(), callbacks[1:], size, None, args.warmup)


def _result(
    torch: Any,
    device: Any,
    windows: list[float],
    accelkit: list[Any],
    size: int,
    optim: Any,
    warmup: int,
) -> dict[str, Any]:
    """A variant's figures; none of its windows where tune's trials ran past the untimed
    `warmup` steps into them (a candidate's rounds run twice at most: 18 units)."""
    result: dict[str, Any] = {
        "step_s": windows,
        "samples_per_step": size,
        "peak_memory_bytes": gpu_compare._peak_memory(torch, device),
        "optim": str(optim) if optim is not None else None,
    }
    if accelkit and accelkit[0].report is not None:
        report = accelkit[0].report
        result.update(
            mfu_reported=report.mfu,
            float8_share=report.float8_share,
            precision_mfu=report.precision_mfu,
            tuning=report.tuning,
        )
        trained = (report.tuning or {}).get("steps", 0)
        if trained > warmup:
            del result["step_s"]
            result["error"] = (
                f"tune's trials took {trained} steps, past the {warmup}-step warm-up: the "
                "windows timed trial steps (raise --warmup)"
            )
    return result


def run_variant(args: argparse.Namespace) -> dict[str, Any]:
    return run_hf(args) if args.variant.startswith("hf_") else run_lightning(args)


# -- the comparison ----------------------------------------------------------------------


def _arguments(args: argparse.Namespace, variant: str) -> list[str]:
    found = [__file__, "--variant", variant, "--model", args.model]
    found += ["--steps", str(args.steps), "--warmup", str(args.warmup)]
    found += ["--windows", str(args.windows)]
    if args.planned:
        found += ["--planned", str(args.planned)]
    if args.batch_size:
        found += ["--batch-size", str(args.batch_size)]
    if args.seq_len:
        found += ["--seq-len", str(args.seq_len)]
    return found + (["--smoke"] if args.smoke else [])


def compare(args: argparse.Namespace) -> dict[str, Any]:
    rounds: list[dict[str, Any]] = []
    for number in range(args.rounds):
        order = args.variants if number % 2 == 0 else list(reversed(args.variants))
        rounds.append({})
        for variant in order:
            rounds[-1][variant] = gpu_compare.run_child(_arguments(args, variant), args.timeout)
            failed = "error" in rounds[-1][variant]
            print(
                f"  round {number + 1} {variant}: {'error' if failed else 'done'}",
                file=sys.stderr,
                flush=True,
            )
            gpu_compare.write_json(args.out, summarise(args, rounds))
    return summarise(args, rounds)


def _ratios(rounds: list[dict[str, Any]], variant: str, other: str) -> list[float]:
    """`other`'s median step over `variant`'s, in each round that timed both."""
    return [
        statistics.median(r[other]["step_s"]) / statistics.median(r[variant]["step_s"])
        for r in rounds
        if r.get(variant, {}).get("step_s") and r.get(other, {}).get("step_s")
    ]


def summarise(args: argparse.Namespace, rounds: list[dict[str, Any]]) -> dict[str, Any]:
    first = args.variants[0]
    rows = []
    for variant in args.variants:
        runs = [r[variant] for r in rounds if variant in r]
        medians = [statistics.median(run["step_s"]) for run in runs if run.get("step_s")]
        ratios = _ratios(rounds, variant, first)
        errors = [run["error"] for run in runs if "error" in run]
        row: dict[str, Any] = {"variant": variant, "errors": errors}
        if medians:
            size = next(run.get("samples_per_step") or 0 for run in runs if run.get("step_s"))
            step = statistics.median(medians)
            row.update(
                step_ms=step * 1e3, step_ms_rounds=[m * 1e3 for m in medians],
                samples_per_s=size / step,
                vs_first=statistics.median(ratios) if ratios else None, vs_first_rounds=ratios,
            )  # fmt: skip
            tuned = [run["tuning"] for run in runs if run.get("tuning")]
            if tuned:
                row["tune_chosen"] = [t["chosen"] for t in tuned]
                row["tune_s"] = [t["seconds"] for t in tuned]
                row["tune_speedup"] = [t.get("speedup") for t in tuned]  # over its baseline
                row["tune_speedup_spread"] = [t.get("speedup_spread") for t in tuned]
            reported = [run.get("mfu_reported") for run in runs]
            row["mfu_reported"] = [m for m in reported if m is not None] or None
            row["vs_each"] = {
                other: found
                for other in args.variants
                if other != variant and (found := _ratios(rounds, variant, other))
            }
        rows.append(row)
    return {
        "benchmark": "trainers_tuned",
        "model": args.model,
        "steps": args.steps,
        "windows": args.windows,
        "warmup": args.warmup,
        "rounds": args.rounds,
        "rows": rows,
        "raw": rounds,
    }


def show(result: dict[str, Any]) -> None:
    """The table (ratio: against the first variant, median and range over the rounds),
    then each accelkit variant against every other one."""
    print(
        f"{result['model']}: {result['rounds']} paired rounds, {result['windows']} x "
        f"{result['steps']} steps after {result['warmup']} (ratio: x the first variant)"
    )
    print(f"{'variant':<20}{'step ms':>9}{'samples/s':>11}{'ratio':>8}{'rounds':>16}  tune")
    for row in result["rows"]:
        if "step_ms" not in row:
            print(
                f"{row['variant']:<20} error: {row['errors'][-1][-300:] if row['errors'] else '?'}"
            )
            continue
        ratios = row["vs_first_rounds"]
        ratio = "-" if row["vs_first"] is None else f"{row['vs_first']:.3f}"
        spread = f"{min(ratios):.3f}-{max(ratios):.3f}" if ratios else "-"
        print(f"{row['variant']:<20}{row['step_ms']:>9.2f}{row['samples_per_s']:>11,.1f}"
              f"{ratio:>8}{spread:>16}  {_tuning(row)}")  # fmt: skip
    for row in result["rows"]:
        if "accelkit" in row["variant"] and row.get("vs_each"):
            against = ", ".join(
                f"{statistics.median(found):.3f}x {other} ({min(found):.3f}-{max(found):.3f})"
                for other, found in row["vs_each"].items()
            )
            print(f"{row['variant']} against: {against}")


def _tuning(row: dict[str, Any]) -> str:
    """Per round: what tune kept, how much faster than its baseline in its paired
    rounds (their spread), the trials' seconds; then the MFU accelkit reported."""
    keys = ("tune_chosen", "tune_speedup", "tune_speedup_spread", "tune_s")
    rounds = zip(*(row.get(key, []) for key in keys), strict=True)
    kept = []
    for chosen, speedup, spread, seconds in rounds:
        figure = f"{speedup:.2f}x" if speedup else "?"
        within = f" {spread[0]:.2f}-{spread[1]:.2f}" if spread else ""
        kept.append(f"{chosen} ({figure}{within}, {seconds:.0f} s)")
    mfu = (
        "; MFU " + ", ".join(f"{m:.1%}" for m in row["mfu_reported"])
        if row.get("mfu_reported")
        else ""
    )
    return ", ".join(kept) + mfu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=models.MODELS, default="hf-gpt2")
    parser.add_argument("--batch-size", type=int, default=None, help="default: per model")
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps per window")
    parser.add_argument("--windows", type=int, default=3, help="timed windows per run")
    parser.add_argument("--warmup", type=int, default=60, help="untimed steps first (trials)")
    parser.add_argument("--rounds", type=int, default=2, help="paired rounds")
    parser.add_argument(
        "--variants", nargs="+", choices=VARIANTS, default=["hf_bf16", "hf_accelkit"]
    )
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)  # one, internal
    parser.add_argument("--timeout", type=int, default=400, help="seconds per variant")
    parser.add_argument(
        "--planned", type=int, default=None, help="the HF Trainer's max_steps told (a long run)"
    )
    parser.add_argument("--smoke", action="store_true", help="tiny model, CPU: checks the script")
    parser.add_argument(
        "--seq-len", type=int, default=None, help="tokens per sample of llama-1b (2048)"
    )
    parser.add_argument("--out", help="write the results as JSON here (after each variant)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.steps, args.warmup, args.windows, args.rounds = 2, 42, 2, 1
    if args.variant:
        print(json.dumps(run_variant(args)))
        return 0
    result = compare(args)
    show(result)
    gpu_compare.write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
