"""One rank of the FSDP2 tests, started by torchrun on the CPU (gloo).

    python -m torch.distributed.run --nproc-per-node 2 tests/distributed/torch_fsdp_worker.py OUT

Four fits of the same blocks model from the same start, on the same data in the same
order: FSDP2 under an fp32 plan, the same with its blocks checkpointed, FSDP2 under a
bf16 plan (an H100 what-if plan, trained on this CPU), and with tune; then, on rank 0
alone (``distributed=False``), the fp32 and bf16 fits in one process with the global
batch (each rank's batch of 16, so 32). Every fit's loss of each step is the mean of
the ranks' losses (all ranks' batches together make the one-process batch).
Each rank writes OUT/rank<R>.json.
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

BATCH = 16  # per rank


class Block(torch.nn.Module):
    """A pre-norm residual MLP block, as a transformer's feed-forward half."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.up = torch.nn.Linear(width, 2 * width)
        self.down = torch.nn.Linear(2 * width, width)

    calls = 0  # forward passes of every block, recomputations included

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        Block.calls += 1
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Linear(16, 32)
        self.layers = torch.nn.ModuleList(Block(32) for _ in range(4))
        self.head = torch.nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def data(batch: int, n: int = 256) -> torch.utils.data.DataLoader:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(n, 16, generator=generator)
    y = (x @ torch.randn(16, 4, generator=generator)).argmax(1)
    dataset = torch.utils.data.TensorDataset(x, y)
    return torch.utils.data.DataLoader(dataset, batch_size=batch)


def sharded(plan, checkpointing: bool = False):
    """`plan` as the planner writes an FSDP2 choice (helper keys of issue 26)."""
    extra = (
        Setting(Key.SHARDING, "fsdp2", "test: shard"),
        Setting(Key.ACTIVATION_CHECKPOINTING, checkpointing, "test"),
    )
    kept = [s for s in plan.settings if s.key not in (Key.SHARDING, Key.ACTIVATION_CHECKPOINTING)]
    return dataclasses.replace(plan, distribution=Distribution.FSDP, settings=(*kept, *extra))


def fit(plan, *, distributed: bool = True, batch: int = BATCH, n: int = 256, **kwargs):
    kwargs.setdefault("epochs", 2)
    model = Net()
    losses: list[float] = []

    def loss_fn(output, target):
        loss = torch.nn.functional.cross_entropy(output, target)
        losses.append(float(loss))
        return loss

    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    Block.calls = 0
    report = accelkit.torch.fit(
        model,
        data(batch, n),
        optimizer,
        loss_fn,
        plan=plan,
        progress=False,
        distributed=distributed,
        warmup=1,
        window=4,
        **kwargs,
    )
    return model, losses, report


def mean_over_ranks(losses: list[float]) -> list[float]:
    gathered: list = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(gathered, losses)
    return [sum(step) / len(step) for step in zip(*gathered, strict=True)]


def main(out: str) -> None:
    cpu = accelkit.auto_configure(framework="torch", verbose=False)
    bf16 = accelkit.plan_for("H100 SXM", framework="torch")  # trained on this CPU in bf16
    rank = int(os.environ["RANK"])
    result: dict = {}
    for name, plan, kwargs in (
        ("fp32", sharded(cpu), {}),
        ("checkpointed", sharded(cpu, checkpointing=True), {}),
        ("bf16", sharded(bf16), {}),
        ("tuned", sharded(cpu), {"tune": True, "compile": False, "n": 1536, "epochs": 1}),
    ):
        model, losses, report = fit(plan, **kwargs)
        result[name] = {
            "losses": mean_over_ranks(losses),
            "report": report.to_dict(),
            "dtensor": type(next(model.parameters())).__name__,
            "block_calls": Block.calls,
        }
    if rank == 0:
        for name, plan in (("fp32", cpu), ("bf16", bf16)):
            _, losses, _ = fit(plan, distributed=False, batch=2 * BATCH, tune=False)
            result[f"single_{name}"] = losses
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1])
