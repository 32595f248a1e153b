"""One rank of a Lightning fit with `trainer_kwargs` of a plan that shards, measured by
AccelkitCallback; started by torchrun.

    torchrun --nproc-per-node 2 --standalone tests/lightning/fsdp_worker.py cpu OUT
    torchrun --nproc-per-node 1 --standalone tests/lightning/fsdp_worker.py cuda OUT

``cpu`` (gloo): ``planned``, this CPU's plan made to shard: `trainer_kwargs` gives DDP
(Lightning cannot shard on the CPU). ``cuda`` (NCCL): ``single``, this GPU's plan without
sharding, then ``sharded``, the same plan made to shard (FSDPStrategy), from the same
start on the same data in the same order. Each rank writes OUT/rank<R>.json.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import lightning
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "helpers"))
from sharded_plans import SIZES, sharded
from transformers_models import gpt2, lm_batches

import accelkit
from accelkit.lightning import AccelkitCallback, trainer_kwargs


class LM(lightning.LightningModule):
    def __init__(self, device: str) -> None:
        super().__init__()
        layers, width, heads, vocab, context = SIZES[device][:5]
        torch.manual_seed(0)
        self.lm = gpt2(layers=layers, dim=width, heads=heads, vocab=vocab, context=context)
        self.losses: list[float] = []

    def training_step(self, batch, batch_idx):
        return self.lm(**batch).loss

    def on_train_batch_end(self, outputs, batch, batch_idx):
        # the trained steps' losses only (the callback's FLOP count runs training_step too)
        self.losses.append(float(outputs["loss"].detach()))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def train(device: str, plan: Any) -> dict[str, Any]:
    batch, steps, distinct = SIZES[device][5:]
    vocab, context = SIZES[device][3:5]
    batches = lm_batches(distinct * int(os.environ["WORLD_SIZE"]), batch, context, vocab)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    mine = batches[rank::world]  # each rank its own batches, as a distributed sampler
    module = LM(device)
    callback = AccelkitCallback(plan=plan, tune=False, warmup=2)
    trainer = lightning.Trainer(
        **trainer_kwargs(plan, model=module),
        callbacks=[callback],
        max_steps=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        use_distributed_sampler=False,
    )
    ordered = [mine[i % len(mine)] for i in range(steps)]  # batches made already: no batching
    trainer.fit(module, torch.utils.data.DataLoader(ordered, batch_size=None))
    assert callback.report is not None
    return {
        "strategy": type(trainer.strategy).__name__,
        "parameter": type(next(trainer.strategy.model.parameters())).__name__,
        "steps": steps,
        "losses": module.losses,
        "finite": all(math.isfinite(loss) for loss in module.losses),
        "report": callback.report.to_dict(),
        "peak_allocated": torch.cuda.max_memory_allocated() if device == "cuda" else None,
    }


def main(device: str, out: Path) -> None:
    plan = accelkit.auto_configure(framework="torch", verbose=False)
    result: dict[str, Any] = {}
    if device == "cpu":
        result["planned"] = train(device, sharded(plan))
    else:
        result["plan_precision"] = str(plan.precision.value)
        result["single"] = train(device, plan)
        torch.cuda.reset_peak_memory_stats()
        result["sharded"] = train(device, sharded(plan))
    (out / f"rank{os.environ['RANK']}.json").write_text(json.dumps(result, default=str))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
