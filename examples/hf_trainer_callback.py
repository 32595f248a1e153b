"""Measure a Hugging Face `Trainer` run with `accelkit.hf.AccelkitCallback`.

Shows: a `transformers.Trainer` fine-tuning a BERT-style classifier (built from
its config: random weights, nothing downloaded) on tokenized, padded rows, with
`TrainingArguments` filled from accelkit's plan
(`accelkit.hf.training_arguments(plan)`: bf16 or fp16 mixed precision for the
GPU, TF32, pinned memory) and one callback. The callback measures every
optimizer step, counts the FLOPs of a step itself, adds `accelkit/...` figures
(samples/s, tokens/s, MFU) to each of the Trainer's logs and `state.log_history`, the
whole run's to the final log (`accelkit/run/...`), and
leaves the run's `RunReport`, with advice, in `callback.report`. Put first among
the callbacks, it runs before the `report_to` loggers, so they record its keys.

Run on a GPU (logging to TensorBoard, if installed):

    python examples/hf_trainer_callback.py --report-to tensorboard

Smoke test (tiny sizes, output in a temporary folder, fine on a CPU):

    python examples/hf_trainer_callback.py --smoke
"""

from __future__ import annotations

import argparse
import tempfile

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

import accelkit
from accelkit.hf import AccelkitCallback, training_arguments


class PaddedRows(torch.utils.data.Dataset):
    """Rows as `tokenizer(texts, padding="max_length", truncation=True)` gives them: token
    ids padded to `length`, the attention mask, and a label per row."""

    def __init__(self, rows: int, vocab: int, length: int, labels: int) -> None:
        generator = torch.Generator().manual_seed(0)
        self.ids = torch.randint(1, vocab, (rows, length), generator=generator)
        real = torch.randint(length // 4, length + 1, (rows, 1), generator=generator)
        self.mask = (torch.arange(length) < real).long()
        self.ids = self.ids * self.mask  # 0 is the padding token
        self.labels = torch.randint(0, labels, (rows,), generator=generator)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "attention_mask": self.mask[i], "labels": self.labels[i]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, output in a temp folder")
    parser.add_argument("--output-dir", default="bert_classifier")
    parser.add_argument("--report-to", default="none", help="TrainingArguments(report_to=...)")
    args = parser.parse_args()
    # BERT-base on 128-token rows for a GPU run; a two-layer toy of it for the smoke test.
    config = BertConfig(num_labels=4)  # vocab 30,522, 12 layers, width 768
    rows, length, batch, steps = 32_768, 128, 32, 500
    if args.smoke:
        config = BertConfig(vocab_size=512, hidden_size=32, num_hidden_layers=2,
                            num_attention_heads=2, intermediate_size=64, num_labels=4)  # fmt: skip
        rows, length, batch, steps = 32, 32, 8, 4
        args.output_dir = tempfile.mkdtemp(prefix="accelkit-hf-")

    plan = accelkit.auto_configure()
    torch.manual_seed(0)
    model = BertForSequenceClassification(config)
    arguments = TrainingArguments(
        output_dir=args.output_dir,
        per_device_train_batch_size=batch,
        learning_rate=5e-5,
        warmup_steps=steps // 10,
        max_steps=steps,
        logging_steps=2 if args.smoke else 50,  # accelkit's figures join each log
        save_strategy="no",
        report_to=args.report_to,
        disable_tqdm=args.smoke,
        # bf16/fp16, tf32, torch_compile, pin_memory; fsdp where a replica would not fit
        **training_arguments(plan, model=model),
    )
    callback = AccelkitCallback(plan=plan)  # its figures reach the report_to loggers too
    trainer = Trainer(
        model=model,
        args=arguments,
        train_dataset=PaddedRows(rows, config.vocab_size, length, config.num_labels),
        callbacks=[callback],
    )
    with callback:  # stops the GPU sampler if training raises
        trainer.train()

    print(callback.report)
    final = trainer.state.log_history[-1]  # the run's figures, beside train_runtime
    print({key: value for key, value in final.items() if key.startswith("accelkit/run/")})


if __name__ == "__main__":
    main()
