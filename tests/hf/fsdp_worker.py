"""One rank of a Hugging Face `Trainer` fit whose plan shards (FSDP2), measured by
AccelkitCallback; started by torchrun.

    torchrun --nproc-per-node 2 --standalone tests/hf/fsdp_worker.py cpu OUT
    torchrun --nproc-per-node 1 --standalone tests/hf/fsdp_worker.py cuda OUT

``cpu`` (gloo): ``planned``, the Trainer with `training_arguments` of this CPU's plan made
to shard (no ``fsdp`` fields: the Trainer cannot shard on the CPU), then ``gpu_fields``,
the same with the ``fsdp`` fields an H100 plan gives (bf16 and tf32 off): Accelerate
keeps the model whole. ``cuda`` (NCCL): ``single``, the Trainer with this GPU's plan
(bf16) without sharding, then ``sharded``, the same plan made to shard, from the same
start on the same data in the same order. The unsharded run goes first: an Accelerator
given an FSDP plugin sets ``ACCELERATE_USE_FSDP=true`` in the environment, and every
later Accelerator of the process would shard. Each rank writes OUT/rank<R>.json.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "helpers"))
from sharded_plans import SIZES, sharded
from transformers_models import gpt2, lm_batches

import accelkit
from accelkit.hf import AccelkitCallback, training_arguments


def gpu_fields() -> dict[str, Any]:
    """The fields an H100 plan that shards gives, with what needs a GPU turned off."""
    fields = training_arguments(sharded(accelkit.plan_for("H100 SXM", count=8)))
    return {**fields, "bf16": False, "tf32": None, "dataloader_pin_memory": False}


def train(device: str, out: Path, plan: Any, fields: dict[str, Any]) -> dict[str, Any]:
    layers, width, heads, vocab, context, batch, steps, distinct = SIZES[device]
    batches = lm_batches(distinct * int(os.environ["WORLD_SIZE"]), batch, context, vocab)
    rows = [{k: v[i] for k, v in b.items()} for b in batches for i in range(batch)]
    args = transformers.TrainingArguments(
        output_dir=str(out / "run"),
        report_to=[],
        use_cpu=device == "cpu",
        per_device_train_batch_size=batch,
        max_steps=steps,
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        learning_rate=1e-3,
        seed=0,
        **fields,
    )
    callback = AccelkitCallback(plan=plan, warmup=2)
    model = gpt2(layers=layers, dim=width, heads=heads, vocab=vocab, context=context)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=rows, callbacks=[callback])
    with callback:
        trainer.train()
    assert callback.report is not None
    parameter = next(trainer.model.parameters())
    return {
        "fsdp_fields": "fsdp" in fields,
        "distributed_type": trainer.accelerator.distributed_type.name,
        "fsdp_enabled": trainer.is_fsdp_enabled,
        "parameter": type(parameter).__name__,
        "model": type(trainer.model).__name__,
        "losses": [e["loss"] for e in trainer.state.log_history if "loss" in e],
        "report": callback.report.to_dict(),
        "peak_allocated": torch.cuda.max_memory_allocated() if device == "cuda" else None,
    }


def main(device: str, out: Path) -> None:
    result: dict[str, Any] = {}
    if device == "cpu":
        plan = sharded(accelkit.auto_configure(framework="torch", verbose=False))
        result["planned"] = train(device, out, plan, training_arguments(plan))
        result["gpu_fields"] = train(device, out, plan, gpu_fields())
    else:
        plan = accelkit.auto_configure(framework="torch", verbose=False)
        result["plan_precision"] = str(plan.precision.value)
        result["single"] = train(device, out, plan, training_arguments(plan))
        torch.cuda.reset_peak_memory_stats()
        result["sharded"] = train(device, out, sharded(plan), training_arguments(sharded(plan)))
    for run in result.values():
        if isinstance(run, dict):
            run["finite"] = all(math.isfinite(loss) for loss in run["losses"])
    rank = int(os.environ["RANK"])
    (out / f"rank{rank}.json").write_text(json.dumps(result, default=str))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
