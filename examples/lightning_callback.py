"""Measure a Lightning `Trainer.fit` with `accelkit.lightning.AccelkitCallback`.

Shows: a LightningModule trained by Lightning's own `Trainer`, with the
Trainer's precision, accelerator, devices and strategy taken from accelkit's
plan (`accelkit.lightning.trainer_kwargs(plan)`: "bf16-mixed" on A100/H100/H200,
"16-mixed" on T4/V100, DDP under torchrun) and one callback added. The callback
counts a training step's FLOPs through your `training_step` (no FLOP formula to
supply), logs throughput, MFU and input wait to the Trainer's loggers every
`log_every_n_steps` steps (`accelkit/samples_per_second`, ...) and the whole run's
figures at the end (`accelkit/run/samples_per_second`, ...), and leaves the run's
`RunReport`, with advice, in `callback.report`.

Run on a GPU (or several: `torchrun --nproc-per-node 4 examples/lightning_callback.py`):

    python examples/lightning_callback.py --epochs 10

Smoke test (tiny sizes, logs in a temporary folder, fine on a CPU):

    python examples/lightning_callback.py --smoke
"""

from __future__ import annotations

import argparse
import tempfile

import lightning
import torch
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torch.nn import functional as F

import accelkit
from accelkit.lightning import AccelkitCallback, trainer_kwargs


class Forecaster(lightning.LightningModule):
    """Predicts the next `horizon` steps of a multivariate series from the last `history`
    steps with dilated 1-D convolutions (a small temporal convolutional network)."""

    def __init__(self, channels: int, width: int, horizon: int, lr: float = 1e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        layers: list[nn.Module] = [nn.Conv1d(channels, width, 1)]
        for dilation in (1, 2, 4, 8):
            layers += [nn.Conv1d(width, width, 3, padding=dilation, dilation=dilation), nn.GELU()]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, channels * horizon)

    def forward(self, series: torch.Tensor) -> torch.Tensor:  # (batch, channels, history)
        features = self.body(series)[:, :, -1]
        return self.head(features).view(len(series), self.hparams.channels, self.hparams.horizon)

    def training_step(self, batch, batch_idx):
        history, future = batch
        loss = F.mse_loss(self(history), future)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        history, future = batch
        self.log("val_loss", F.mse_loss(self(history), future), prog_bar=True)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=1e-2)


def sensor_windows(count: int, channels: int, history: int, horizon: int):
    """(past, future) windows of noisy sines: a stand-in for sensor logs."""
    t = torch.arange(history + horizon).float()
    phase = torch.rand(count, channels, 1) * 6.28
    speed = 0.05 + 0.1 * torch.rand(count, channels, 1)
    series = torch.sin(speed * t + phase) + 0.05 * torch.randn(count, channels, len(t))
    return torch.utils.data.TensorDataset(series[..., :history], series[..., history:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, logs in a temp folder")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--logs", default="lightning_logs", help="CSVLogger folder")
    args = parser.parse_args()
    # windows, channels, history, horizon, conv width, batch, accelkit window
    count, channels, history, horizon, width, batch, window = 200_000, 32, 256, 32, 256, 512, 50
    if args.smoke:
        count, channels, history, horizon, width, batch, window = 256, 4, 32, 8, 16, 32, 2
        args.epochs, args.logs = 1, tempfile.mkdtemp(prefix="accelkit-lightning-")

    plan = accelkit.auto_configure()
    data = sensor_windows(count, channels, history, horizon)
    train, val = torch.utils.data.random_split(data, [0.9, 0.1])
    loader = torch.utils.data.DataLoader(train, batch_size=batch, shuffle=True, drop_last=True)
    val_loader = torch.utils.data.DataLoader(val, batch_size=batch)

    model = Forecaster(channels, width, horizon)
    callback = AccelkitCallback(window=window)
    trainer = lightning.Trainer(
        max_epochs=args.epochs,
        callbacks=[callback],
        logger=CSVLogger(args.logs, name="forecaster"),
        log_every_n_steps=window,
        enable_checkpointing=not args.smoke,
        enable_progress_bar=not args.smoke,
        enable_model_summary=not args.smoke,
        # precision, accelerator, devices, strategy (sharded where a replica would not fit)
        **trainer_kwargs(plan, model=model),
    )
    trainer.fit(model, loader, val_loader)

    if trainer.is_global_zero:
        print(callback.report)
        print(f"metrics logged to {trainer.logger.log_dir}/metrics.csv")


if __name__ == "__main__":
    main()
