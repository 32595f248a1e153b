"""A `Trainer` with dynamic padding (`DataCollatorWithPadding`, a tokenizer built here):
each step's FLOPs follow its batch's length, where the first step's count stood for
every step."""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")
pytest.importorskip("accelerate", reason="the Trainer needs accelerate")
pytestmark = pytest.mark.torch

from accelkit.hf import AccelkitCallback
from accelkit.profiling.flops_torch import count_train_step_flops

from ..helpers.torch_data import CPU_PLAN
from ..helpers.transformers_models import bert

VOCAB, CONTEXT = 64, 128


def _tokenizer():
    words = {"[PAD]": 0, "[UNK]": 1, **{f"w{i}": i + 2 for i in range(VOCAB - 2)}}
    model = tokenizers.models.WordLevel(words, unk_token="[UNK]")
    tokenizer = tokenizers.Tokenizer(model)
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="[PAD]", unk_token="[UNK]"
    )


class _Sentences(torch.utils.data.Dataset):
    """Tokenized rows of lengths 4 to 120, as a tokenized dataset holds them."""

    def __init__(self, tokenizer, rows: int = 40) -> None:
        rng = random.Random(0)
        texts = [
            " ".join(f"w{rng.randrange(VOCAB - 2)}" for _ in range(rng.randint(4, 120)))
            for _ in range(rows)
        ]
        self.rows = [{**tokenizer(text), "labels": i % 3} for i, text in enumerate(texts)]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict:
        return self.rows[index]


def test_a_trainer_with_dynamic_padding_counts_each_steps_own_length(tmp_path) -> None:
    tokenizer = _tokenizer()
    collate = transformers.DataCollatorWithPadding(tokenizer)
    seen = []

    def collated(rows):
        batch = collate(rows)
        seen.append({k: v.clone() for k, v in batch.items()})
        return batch

    model = bert("classification", vocab=VOCAB, context=CONTEXT)
    callback = AccelkitCallback(plan=CPU_PLAN, warmup=1, window=2, sample_gpu=False)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        use_cpu=True,
        per_device_train_batch_size=4,
        max_steps=10,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        seed=0,
    )
    trainer = transformers.Trainer(
        model=model,
        args=args,
        train_dataset=_Sentences(tokenizer),
        data_collator=collated,
        callbacks=[callback],
    )
    with callback:
        trainer.train()
    lengths = {batch["input_ids"].shape[1] for batch in seen[:10]}
    assert len(lengths) > 3  # dynamic padding: the steps' lengths differ
    counts = [count_train_step_flops(model, batch).total for batch in seen[1:10]]
    report = callback.report
    assert report.steady_steps == 9
    assert report.flops_per_step == pytest.approx(sum(counts) / len(counts), rel=0.02)
    assert "own batches' shapes" in report.notes["flops_per_step"]
