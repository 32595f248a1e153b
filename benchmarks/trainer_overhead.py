"""What accelkit's trainer callbacks cost: the same Trainer with and without the callback,
in paired rounds in one process.

Each round builds a fresh Trainer (Hugging Face `Trainer` with ``bf16=True``, or
Lightning ``Trainer(precision="bf16-mixed")``) on the same model and trains
``--warmup + --steps`` optimizer steps of Hugging Face GPT-2 (small; a tiny config with
``--smoke``) on synthetic token batches; a timing callback synchronises the device at the
end of warm-up and at the end and gives the steady step time. The variants alternate
(the order rotates every round), so a drift of the machine falls on both alike.

    PYTHONPATH=src python benchmarks/trainer_overhead.py --trainer hf --steps 30 --rounds 5 \\
        --out benchmarks/results/h200_trainer_overhead_hf.json

Prints a table and writes JSON: each round's step time per variant, the median ratio
(with callback / without) and its spread, and the callback's own figures (its step
time and MFU) for the last round.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from typing import Any


def gpt2(torch: Any, smoke: bool, device: Any) -> tuple[Any, int]:
    """Hugging Face GPT-2 small (a tiny one with `smoke`) on `device`, and its length."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = (
        GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=512, n_positions=64)
        if smoke
        else GPT2Config()
    )
    return GPT2LMHeadModel(config).to(device), config.n_positions


class Tokens:
    """`count` samples of random token ids (the same every epoch), as dicts."""

    def __init__(self, torch: Any, count: int, length: int, vocab: int) -> None:
        self.ids = torch.randint(0, vocab, (count, length))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict[str, Any]:
        ids = self.ids[index]
        return {"input_ids": ids, "attention_mask": ids.new_ones(ids.shape), "labels": ids}


def hf_round(torch: Any, model: Any, data: Tokens, args: argparse.Namespace, on: bool) -> Any:
    """Train one round through the HF Trainer; (steady seconds per step, callback)."""
    import transformers

    import accelkit.hf

    marks: list[float] = []

    class Timer(transformers.TrainerCallback):
        def on_step_begin(self, a: Any, state: Any, control: Any, **_: Any) -> None:
            if state.global_step == args.warmup:
                _sync(torch)
                marks.append(time.perf_counter())

        def on_train_end(self, a: Any, state: Any, control: Any, **_: Any) -> None:
            _sync(torch)
            marks.append(time.perf_counter())

    callback = accelkit.hf.AccelkitCallback() if on else None
    training = transformers.TrainingArguments(
        output_dir=tempfile.mkdtemp(),
        max_steps=args.warmup + args.steps,
        per_device_train_batch_size=args.batch_size,
        bf16=torch.cuda.is_available(),
        use_cpu=not torch.cuda.is_available(),
        report_to=[],
        save_strategy="no",
        logging_steps=args.steps,
        disable_tqdm=True,
    )
    callbacks = [Timer()] + ([callback] if callback is not None else [])
    transformers.Trainer(model, training, train_dataset=data, callbacks=callbacks).train()
    return (marks[1] - marks[0]) / args.steps, callback


def lightning_round(
    torch: Any, model: Any, data: Tokens, args: argparse.Namespace, on: bool
) -> Any:
    """Train one round through Lightning; (steady seconds per step, callback)."""
    import lightning as L  # Lightning's convention

    import accelkit.lightning

    marks: list[float] = []

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = model

        def training_step(self, batch: Any, index: int) -> Any:
            return self.net(**batch).loss

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.net.parameters(), lr=1e-4)

    class Timer(L.Callback):
        def on_train_batch_start(self, trainer: Any, *_: Any) -> None:
            if trainer.global_step == args.warmup:
                _sync(torch)
                marks.append(time.perf_counter())

        def on_train_end(self, *_: Any) -> None:
            _sync(torch)
            marks.append(time.perf_counter())

    callback = accelkit.lightning.AccelkitCallback() if on else None
    trainer = L.Trainer(
        accelerator="gpu" if torch.cuda.is_available() else "cpu",
        devices=1,
        precision="bf16-mixed" if torch.cuda.is_available() else "32-true",
        max_steps=args.warmup + args.steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[Timer()] + ([callback] if callback is not None else []),
    )
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch_size, shuffle=False)
    trainer.fit(Module(), train_dataloaders=loader)
    return (marks[1] - marks[0]) / args.steps, callback


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model, length = gpt2(torch, args.smoke, device)
    samples = args.batch_size * (args.warmup + args.steps)
    data = Tokens(torch, samples, length, model.config.vocab_size)
    one_round = hf_round if args.trainer == "hf" else lightning_round
    times: dict[str, list[float]] = {"without": [], "with": []}
    callback = None
    for index in range(args.rounds):
        order = ("without", "with") if index % 2 == 0 else ("with", "without")
        for variant in order:
            step_s, made = one_round(torch, model, data, args, variant == "with")
            times[variant].append(step_s)
            callback = made or callback
    ratios = [w / b for w, b in zip(times["with"], times["without"], strict=True)]
    report = callback.report if callback is not None else None
    return {
        "trainer": args.trainer,
        "model": "hf-gpt2" + ("-tiny" if args.smoke else ""),
        "batch_size": args.batch_size,
        "tokens_per_step": args.batch_size * length,
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "steps": args.steps,
        "warmup": args.warmup,
        "step_s": times,
        "ratio_median": statistics.median(ratios),
        "ratio_range": [min(ratios), max(ratios)],
        "callback_step_s": report.step_time_s if report else None,
        "callback_mfu": report.mfu if report else None,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "command": " ".join(sys.argv),
    }


def show(result: dict[str, Any]) -> None:
    tokens = result["tokens_per_step"]
    print(
        f"{result['trainer']} Trainer, {result['model']} B{result['batch_size']}, "
        f"{result['device']}: {result['steps']} steps a round after {result['warmup']}"
    )
    print(f"{'variant':<10}{'median ms':>12}{'range ms':>20}{'tokens/s':>12}")
    for variant, values in result["step_s"].items():
        median = statistics.median(values)
        span = f"{min(values) * 1e3:.2f}-{max(values) * 1e3:.2f}"
        print(f"{variant:<10}{median * 1e3:>12.2f}{span:>20}{tokens / median:>12,.0f}")
    low, high = result["ratio_range"]
    print(
        f"with / without: {result['ratio_median']:.4f} (rounds {low:.4f}-{high:.4f}); "
        f"callback step {result['callback_step_s']} s, MFU {result['callback_mfu']}"
    )


def _sync(torch: Any) -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trainer", choices=("hf", "lightning"), default="hf")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="a tiny GPT-2 (CPU check)")
    parser.add_argument("--out", help="write the JSON result here")
    args = parser.parse_args(argv)
    result = measure(args)
    show(result)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as out:
            json.dump(result, out, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
