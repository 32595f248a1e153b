"""One rank of the PyTorch data-parallel tests, started by torchrun (or alone).

    python -m torch.distributed.run --nproc-per-node 2 tests/distributed/torch_worker.py MODE OUT

Modes:
    train  two fits on a separable problem: plain (2 epochs), then with gradient
           accumulation of 3 (16 batches per epoch: the last step is a leftover);
           each rank writes OUT/rank<R>.json with both reports and a checksum of
           every rank's parameters.
    die    rank 1 raises in its loss on step 3.
    hang   rank 1 sleeps in its loss on step 3 (alive, never reaching the all-reduce).
    alone  auto_configure + fit, for a process whose process group cannot start.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path

import torch

import accelkit
import accelkit.torch

# Outside pytest: the shared test data is imported from its folder.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "helpers"))
from torch_data import mlp, separable


class Boom(Exception):
    pass


def checksum(model) -> str:
    digest = hashlib.sha256()
    for parameter in model.parameters():
        digest.update(parameter.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def count_reductions() -> list[int]:
    """Record each bucket DDP all-reduces, through a comm hook on the model fit wraps."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    from accelkit.torch.distributed import parallel

    reduced: list[int] = []
    wrap = parallel.wrap

    def hook(state, bucket):
        reduced.append(bucket.index())
        return allreduce_hook(state, bucket)

    def counting_wrap(model, device, **options):
        ddp = wrap(model, device, **options)
        ddp.register_comm_hook(None, hook)
        parallel.wrap = wrap
        return ddp

    parallel.wrap = counting_wrap
    return reduced


def fit(model, loss_fn, **kwargs):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    return accelkit.torch.fit(
        model, separable(shuffle=True), optimizer, loss_fn, warmup=2, window=4, **kwargs
    )


def main(mode: str, out: str) -> None:
    plan = accelkit.auto_configure(framework="torch", verbose=mode == "alone")
    rank = int(os.environ.get("RANK", "0"))
    if mode in ("die", "hang"):
        step = [0]

        def failing(output, target):
            step[0] += 1
            if rank == 1 and step[0] == 3:
                if mode == "hang":
                    time.sleep(3600)  # alive, but never reaches the next all-reduce
                raise Boom(f"rank {rank} fails on purpose at step 3")
            return torch.nn.functional.cross_entropy(output, target)

        fit(mlp(seed=rank), failing, epochs=2)
        return
    model = mlp(seed=rank)  # a different start on each rank: DDP must broadcast rank 0's
    report = fit(model, torch.nn.CrossEntropyLoss(), epochs=2)
    result = {"plan": plan.to_dict(), "report": report.to_dict()}
    if mode == "train":
        accumulated = mlp(seed=rank)
        reduced = count_reductions()
        result["accumulated"] = fit(
            accumulated, torch.nn.CrossEntropyLoss(), epochs=1, accumulation_steps=3
        ).to_dict()
        result["reduced_steps"] = reduced.count(0)  # DDP all-reduces of the first bucket
        sums = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(sums, [checksum(model), checksum(accumulated)])
        result["checksums"] = sums
        # tune under DDP: rank 0 decides each verdict, every rank follows (24 batches a
        # rank: the baseline's 10 steps and the fused optimizer's 10; compile is fixed).
        tuned = mlp(seed=rank)
        tuned_report = accelkit.torch.fit(
            tuned,
            separable(n=1536, shuffle=True),
            torch.optim.AdamW(tuned.parameters()),
            torch.nn.CrossEntropyLoss(),
            warmup=2,
            window=4,
            tune=True,
            compile=False,
            progress=False,
        )
        kept = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(kept, checksum(tuned))
        result["tuned"] = {"tuning": tuned_report.tuning, "checksums": kept}
        report.save(os.path.join(out, "saved.json"))  # rank 0 only
        torch.distributed.destroy_process_group()
    with open(os.path.join(out, f"rank{rank}.json"), "w", encoding="utf-8") as handle:
        json.dump(result, handle, default=str)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
