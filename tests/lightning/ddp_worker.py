"""One rank of a Lightning DDP fit measured by AccelkitCallback (torchrun, gloo, CPU).

    torchrun --nproc-per-node 2 --standalone tests/lightning/ddp_worker.py OUT

The Trainer's arguments come from `trainer_kwargs(auto_configure())`; each rank
writes its callback's report to OUT/rank<N>.json, rank 0's logger writes OUT/run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import lightning.pytorch as pl
import torch
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

import accelkit
from accelkit.lightning import AccelkitCallback, trainer_kwargs

SAMPLES, BATCH = 512, 32


class Classifier(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)
        )

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Hooked(pl.Callback):
    """Registers PyTorch's own all-reduce hook on the Trainer's DDP model."""

    def on_fit_start(self, trainer, pl_module):
        trainer.strategy.model.register_comm_hook(None, allreduce_hook)


def fit(loader, kwargs, logger, first=None):
    callback = AccelkitCallback(warmup=1, window=2)
    trainer = pl.Trainer(
        callbacks=[first, callback] if first else [callback],
        logger=logger,
        max_epochs=1,
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        **kwargs,
    )
    trainer.fit(Classifier(), loader)
    return callback, trainer


def main(out: Path) -> None:
    plan = accelkit.auto_configure(framework="torch", verbose=False)
    torch.manual_seed(0)
    x = torch.randn(SAMPLES, 16)
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(x, (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()),
        batch_size=BATCH,
    )
    kwargs = trainer_kwargs(plan)
    callback, trainer = fit(loader, kwargs, pl.loggers.CSVLogger(out, name="run"))
    result = {
        "kwargs": kwargs,
        "world_size": trainer.world_size,
        "report": callback.report.to_dict(),
    }
    # a DDP model with a communication hook of its own keeps it, untimed (on the CPU
    # DDPStrategy(ddp_comm_hook=...) registers none: Lightning registers it on CUDA only)
    callback, _ = fit(loader, kwargs, logger=False, first=Hooked())
    result["hooked"] = callback.report.to_dict()
    (out / f"rank{trainer.global_rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
