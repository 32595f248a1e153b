"""One rank of the uneven-loaders test, started by torchrun on the CPU (gloo).

    python -m torch.distributed.run --nproc-per-node 2 tests/distributed/torch_uneven_worker.py OUT

An FSDP2 fit whose ranks hold loaders of different lengths (16 and 8 batches, each rank's
own shard, not a DataLoader accelkit could reshard): before, the longer rank waited in
FSDP's all-gather while the shorter one went on to the fit's end, and gloo aborted the
job (issue 38, E12). Each rank writes OUT/rank<R>.json.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys

import torch

import accelkit
import accelkit.torch
from accelkit.planning.keys import Key
from accelkit.planning.types import Distribution, Setting


class Batches:
    """This rank's own shard, with its length."""

    def __init__(self, loader: torch.utils.data.DataLoader) -> None:
        self.loader = loader

    def __iter__(self):
        return iter(self.loader)

    def __len__(self) -> int:
        return len(self.loader)


def main(out: str) -> None:
    cpu = accelkit.auto_configure(framework="torch", verbose=False)
    kept = [s for s in cpu.settings if s.key not in (Key.SHARDING, Key.ACTIVATION_CHECKPOINTING)]
    sharded = (
        Setting(Key.SHARDING, "fsdp2", "shard"),
        Setting(Key.ACTIVATION_CHECKPOINTING, False, ""),
    )
    plan = dataclasses.replace(cpu, distribution=Distribution.FSDP, settings=(*kept, *sharded))
    rank = int(os.environ["RANK"])
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.ReLU(),
        torch.nn.Linear(32, 4),
    )  # fmt: skip
    x = torch.randn(256 if rank == 0 else 128, 16)
    data = torch.utils.data.TensorDataset(x, x[:, :4].argmax(1))
    loader = Batches(torch.utils.data.DataLoader(data, batch_size=16))
    report = accelkit.torch.fit(
        model, loader, torch.optim.AdamW(model.parameters()), torch.nn.functional.cross_entropy,
        plan=plan, progress=False, tune=False, warmup=1, window=4, epochs=2,
    )  # fmt: skip
    with open(os.path.join(out, f"rank{rank}.json"), "w") as file:
        json.dump({"steps": report.steps, "facts": report.facts}, file, default=str)


if __name__ == "__main__":
    main(sys.argv[1])
