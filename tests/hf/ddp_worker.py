"""One rank of a Hugging Face `Trainer` fit under DDP measured by AccelkitCallback
(torchrun, gloo, CPU).

    torchrun --nproc-per-node 2 --standalone tests/hf/ddp_worker.py OUT

The Trainer starts the process group and wraps the model in DDP itself; each rank
writes its callback's report to OUT/rank<N>.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "helpers"))
from torch_data import CPU_PLAN
from transformers_models import gpt2, lm_batches

from accelkit.hf import AccelkitCallback

BATCH, LENGTH, VOCAB, ROWS = 4, 32, 256, 160


def main(out: Path) -> None:
    batches = lm_batches(ROWS // BATCH, BATCH, LENGTH, VOCAB)
    rows = [{k: v[i] for k, v in b.items()} for b in batches for i in range(BATCH)]
    args = transformers.TrainingArguments(
        output_dir=str(out / "run"),
        report_to=[],
        use_cpu=True,
        per_device_train_batch_size=BATCH,
        max_steps=20,
        logging_steps=5,
        save_strategy="no",
    )
    callback = AccelkitCallback(plan=CPU_PLAN, warmup=2)
    trainer = transformers.Trainer(
        model=gpt2(vocab=VOCAB, context=LENGTH), args=args, train_dataset=rows, callbacks=[callback]
    )
    with callback:
        trainer.train()
    rank = torch.distributed.get_rank()
    (out / f"rank{rank}.json").write_text(json.dumps(callback.report.to_dict(), default=str))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
