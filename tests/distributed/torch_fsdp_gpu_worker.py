"""One rank of the FSDP2 test on a GPU: `accelkit.torch.fit` of a GPT-2 small (124M,
built from its config: nothing downloads) under torchrun, NCCL, with this GPU's plan made
to shard; then the same fit unsharded in one process (``distributed=False``), from the
same start on the same batches. Used by tests/distributed/test_torch_fsdp_gpu.py:

    NCCL_NVLS_ENABLE=0 torchrun --nproc-per-node 1 --standalone \\
        tests/distributed/torch_fsdp_gpu_worker.py OUT

The plan carries the model's size (``Request(params=...)``), so the report has the
plan's memory prediction beside the measured peak. Each rank writes OUT/rank<R>.json.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "helpers"))
from transformers_models import gpt2, lm_batches

import accelkit
import accelkit.torch
from accelkit.planning import Request, plan
from accelkit.planning.keys import Key
from accelkit.planning.types import Distribution, Setting

BATCH, LENGTH, VOCAB, DISTINCT, EPOCHS = 8, 512, 50304, 4, 6  # 24 steps on 4 batches


def sharded(base: Any) -> Any:
    """`base` as the planner writes an FSDP2 choice (as torch_fsdp_worker.py does)."""
    extra = (
        Setting(Key.SHARDING, "fsdp2", "test: shard"),
        Setting(Key.ACTIVATION_CHECKPOINTING, False, "test"),
    )
    kept = [s for s in base.settings if s.key not in (Key.SHARDING, Key.ACTIVATION_CHECKPOINTING)]
    return dataclasses.replace(base, distribution=Distribution.FSDP, settings=(*kept, *extra))


def model() -> Any:
    return gpt2(layers=12, dim=768, heads=12, vocab=VOCAB, context=LENGTH)


def loader() -> torch.utils.data.DataLoader:
    batches = lm_batches(DISTINCT, BATCH, LENGTH, VOCAB)
    rows = [{k: v[i] for k, v in b.items()} for b in batches for i in range(BATCH)]
    return torch.utils.data.DataLoader(rows, batch_size=BATCH)


def fit(chosen: Any, *, distributed: bool) -> dict[str, Any]:
    net = model()
    losses: list[float] = []

    def keep(module: Any, args: Any, kwargs: Any, output: Any) -> None:
        if module.training:
            losses.append(float(output.loss.detach()))

    net.register_forward_hook(keep, with_kwargs=True)
    optimizer = torch.optim.AdamW(net.parameters(), lr=3e-4)
    torch.cuda.reset_peak_memory_stats()
    report = accelkit.torch.fit(
        net,
        loader(),
        optimizer,
        None,
        plan=chosen,
        epochs=EPOCHS,
        progress=False,
        distributed=distributed,
        tune=False,
        warmup=2,
        window=4,
    )
    return {
        "losses": losses,
        "finite": all(math.isfinite(loss) for loss in losses),
        "report": report.to_dict(),
        "parameter": type(next(net.parameters())).__name__,
        "peak_allocated": torch.cuda.max_memory_allocated(),
    }


def main(out: Path) -> None:
    applied = accelkit.auto_configure(framework="torch", verbose=False)
    params = sum(p.numel() for p in model().parameters())
    sized = plan(applied.hardware, Request(framework="torch", params=params))
    result = {
        "precision": str(sized.precision.value),
        "params": params,
        "plan_memory": None if sized.memory is None else sized.memory.per_gpu_bytes,
        "single": fit(sized, distributed=False),
        "sharded": fit(sharded(sized), distributed=True),
    }
    rank = int(os.environ["RANK"])
    (out / f"rank{rank}.json").write_text(json.dumps(result, default=str))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
