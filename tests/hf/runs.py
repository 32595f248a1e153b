"""A tiny GPT-2 trained by a real Hugging Face `Trainer` on the CPU, for the tests of
`accelkit.hf` (import it after ``pytest.importorskip("transformers")``)."""

from __future__ import annotations

from typing import Any

import torch
import transformers

from ..helpers.transformers_models import gpt2, lm_batches

BATCH, LENGTH, VOCAB = 4, 32, 256


class Rows(torch.utils.data.Dataset):
    """Dict rows as a tokenized dataset gives them, the last 8 positions padding."""

    def __init__(self, rows: int = 48, seed: int = 0) -> None:
        real = [LENGTH - 8] * BATCH
        batches = lm_batches(rows // BATCH, BATCH, LENGTH, VOCAB, real=real, seed=seed)
        self.rows = [{k: v[i] for k, v in b.items()} for b in batches for i in range(BATCH)]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict:
        return self.rows[index]


def trainer(
    tmp_path: Any,
    callback: Any,
    model: Any = None,
    *,
    eval_rows: int = 0,
    before: tuple[Any, ...] = (),
    **arguments: Any,
) -> transformers.Trainer:
    """A `Trainer` with `callback` passed as docs/integrations.md does (``callbacks=``,
    after the callbacks in `before`); `arguments` go to `TrainingArguments` (12 steps, a
    log every 4, no checkpoint, no logger unless given); `eval_rows` rows of held-out
    data when above 0."""
    arguments = {
        "max_steps": 12,
        "logging_steps": 4,
        "save_strategy": "no",
        "report_to": [],
        **arguments,
    }
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        use_cpu=True,
        per_device_train_batch_size=BATCH,
        per_device_eval_batch_size=BATCH,
        disable_tqdm=True,
        **arguments,
    )
    return transformers.Trainer(
        model=model or gpt2(vocab=VOCAB, context=LENGTH),
        args=args,
        train_dataset=Rows(),
        eval_dataset=Rows(eval_rows, seed=1) if eval_rows else None,
        callbacks=[*before, callback],
    )


def train(tmp_path: Any, callback: Any, model: Any = None, **arguments: Any) -> Any:
    """Train with `callback` (`trainer`'s arguments); the `Trainer` once done."""
    run = trainer(tmp_path, callback, model, **arguments)
    with callback:
        run.train()
    return run
