"""Train a Hugging Face causal language model with `accelkit.torch.fit`.

Shows: a `transformers` Llama-style model built from its config (random weights,
nothing downloaded) trained by `accelkit.torch.fit` on dict batches, as a
tokenized dataset and a padding collator give them (`input_ids`,
`attention_mask`, `labels` with -100 on the padding). With `loss_fn=None` the
fit calls `model(**batch)` and trains on its `.loss`. The report counts tokens
twice: every position (tokens/s) and the real ones under the attention mask.

`tune=` lets the fit measure, during its first steps, the optimizer's fused
implementation and `torch.compile` on this model, and keep the fastest:
"auto" (the default) does so for GPU runs long enough to repay it, True always,
False never; `report.tuning` lists what was measured and kept.

Run on a GPU:

    python examples/torch_fit_causal_lm.py --steps 1000 --tune on --save lm_run.json

Smoke test (tiny sizes, a few steps, fine on a CPU):

    python examples/torch_fit_causal_lm.py --smoke
"""

from __future__ import annotations

import argparse

import torch
from transformers import AutoModelForCausalLM, LlamaConfig

import accelkit

TUNE = {"auto": "auto", "on": True, "off": False}


class SyntheticCorpus(torch.utils.data.Dataset):
    """Token sequences of varying length, standing in for a tokenized text dataset."""

    def __init__(self, rows: int, vocab: int, context: int) -> None:
        generator = torch.Generator().manual_seed(0)
        lengths = torch.randint(context // 2, context + 1, (rows,), generator=generator)
        self.rows = [torch.randint(1, vocab, (int(n),), generator=generator) for n in lengths]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.rows[index]}


def pad_collate(rows: list[dict[str, torch.Tensor]], pad_id: int = 0) -> dict[str, torch.Tensor]:
    """Right-pad to the longest row; the loss ignores the padding (label -100)."""
    ids = torch.nn.utils.rnn.pad_sequence(
        [row["input_ids"] for row in rows], batch_first=True, padding_value=pad_id
    )
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        mask[i, : len(row["input_ids"])] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


# About 120M parameters (GPT-2 small's size with Llama's blocks) for a GPU run.
FULL = {"vocab_size": 32_000, "hidden_size": 768, "intermediate_size": 2048,
        "num_hidden_layers": 12, "num_attention_heads": 12,
        "max_position_embeddings": 1024}  # fmt: skip
SMOKE = {"vocab_size": 512, "hidden_size": 64, "intermediate_size": 128,
         "num_hidden_layers": 2, "num_attention_heads": 2,
         "max_position_embeddings": 32}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a few steps")
    parser.add_argument("--tune", choices=TUNE, default="auto", help="accelkit.torch.fit(tune=)")
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--save", help="write the run report to this JSON file")
    args = parser.parse_args()
    batch_size, rows, workers = (4, 32, 0) if args.smoke else (16, 2048, 4)
    steps = 8 if args.smoke else args.steps
    config = LlamaConfig(
        **(SMOKE if args.smoke else FULL), pad_token_id=0, bos_token_id=1, eos_token_id=2
    )

    plan = accelkit.auto_configure()
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    print(f"{model.num_parameters() / 1e6:.1f}M parameters, precision {plan.precision.value}")
    loader = torch.utils.data.DataLoader(
        SyntheticCorpus(rows, config.vocab_size, config.max_position_embeddings),
        batch_size=batch_size,
        shuffle=True,
        collate_fn=pad_collate,
        num_workers=workers,
        drop_last=True,
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)

    report = accelkit.torch.fit(
        model,
        loader,
        optimizer,
        None,  # the loss is the model's own: model(**batch).loss
        epochs=100,  # a bound: steps= ends the run first
        steps=steps,
        max_grad_norm=1.0,
        tune=TUNE[args.tune],
        window=4 if args.smoke else 50,
    )
    print(report)
    if report.tuning and report.tuning["decision"] == "tuned":
        print(f"tune kept {report.tuning['chosen']}: {report.tuning['speedup']}x the baseline")
    if args.save:
        report.save(args.save)
        print(f"saved {args.save}: render it again with `accelkit report {args.save}`")


if __name__ == "__main__":
    main()
