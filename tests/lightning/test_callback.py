"""accelkit.lightning on real Lightning (CPU): AccelkitCallback in Trainer.fit, trainer_kwargs."""

from __future__ import annotations

import csv
import threading

import pytest

import accelkit
from accelkit.lightning import trainer_kwargs
from accelkit.profiling.metrics import spell

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
pl = pytest.importorskip("lightning.pytorch")

from accelkit.lightning import AccelkitCallback
from accelkit.profiling.flops_torch import count_train_step_flops

from ..helpers.torch_data import CPU_PLAN, separable


class Boom(Exception):
    pass


class Classifier(pl.LightningModule):
    """16 -> 32 -> 4 MLP computing its own loss in training_step."""

    def __init__(self, fail_at: int | None = None) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)
        )
        self.fail_at = fail_at

    def training_step(self, batch, batch_idx):
        if batch_idx == self.fail_at:
            raise Boom("in training_step")
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return {"loss": loss}

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _trainer(tmp_path, callback, **kwargs):
    logger = pl.loggers.CSVLogger(tmp_path, name="run")
    return pl.Trainer(
        accelerator="cpu",
        devices=1,
        callbacks=[callback],
        logger=logger,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **kwargs,
    )


def _sampler_threads():
    return [t for t in threading.enumerate() if "sampler" in t.name.lower() and t.is_alive()]


def test_fit_logs_window_figures_and_reports(tmp_path) -> None:
    callback = AccelkitCallback(CPU_PLAN, warmup=1, window=4)
    trainer = _trainer(tmp_path, callback, max_epochs=2, log_every_n_steps=1)
    loader = separable(n=256, batch=32)  # 8 batches an epoch
    trainer.fit(Classifier(), loader)

    report = callback.report
    assert report.steps == trainer.global_step == 16
    assert report.epochs == 2
    assert report.samples_per_second > 0
    expected = count_train_step_flops(
        Classifier().net,
        torch.randn(32, 16),
        torch.randint(0, 4, (32,)),
        torch.nn.functional.cross_entropy,
    ).total
    assert report.flops_per_step == expected
    assert isinstance(report.advice, list)

    with open(trainer.logger.experiment.metrics_file_path) as file:
        rows = list(csv.DictReader(file))
    samples_per_second = "accelkit/samples_per_second"  # as the HF callback names it
    assert spell("samples_per_second", "lightning") == samples_per_second
    window_rows = [r for r in rows if r.get(samples_per_second)]
    assert len(window_rows) >= 3  # boundaries after warmup, then every 4 steps
    for row in window_rows:
        assert float(row[samples_per_second]) > 0
        assert float(row[spell("step_time_s", "lightning")]) > 0
        assert float(row[spell("achieved_tflops", "lightning")]) > 0
        assert 0 <= float(row[spell("input_wait_share", "lightning")]) <= 1
    assert not any(r.get(spell("mfu", "lightning")) for r in rows)  # a CPU has no peak
    assert any(r.get("train_loss") for r in rows)  # the user's own logging still works

    # Each epoch's mean loss, read once an epoch: the mean of what training_step logged.
    logged = [
        [float(r["train_loss"]) for r in rows if r.get("train_loss") and int(r["epoch"]) == epoch]
        for epoch in (0, 1)
    ]
    assert [len(losses) for losses in logged] == [8, 8]
    assert report.losses == pytest.approx([sum(losses) / 8 for losses in logged], rel=1e-5)
    assert report.losses[1] < report.losses[0]
    assert report.facts["loader"]["type"] == "DataLoader"
    assert report.facts["loader"]["batch_size"] == 32


class EpochLoss(Classifier):
    """Logs its epoch's mean loss, as Lightning averages it (equal batches: the mean)."""

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("epoch_loss", loss, on_step=False, on_epoch=True)
        return loss


def test_losses_are_the_users_under_gradient_accumulation(tmp_path) -> None:
    # Lightning hands on_train_batch_end the loss divided by accumulate_grad_batches.
    callback = AccelkitCallback(CPU_PLAN, warmup=1, window=4, sample_gpu=False)
    trainer = _trainer(tmp_path, callback, max_epochs=2, accumulate_grad_batches=4)
    trainer.fit(EpochLoss(), separable(n=256, batch=32))
    with open(trainer.logger.experiment.metrics_file_path) as file:
        logged = [float(r["epoch_loss"]) for r in csv.DictReader(file) if r.get("epoch_loss")]
    assert trainer.global_step == 4  # 8 batches an epoch, 2 optimizer steps
    assert callback.report.losses == pytest.approx(logged, rel=1e-5)


def test_users_error_passes_through_and_the_sampler_stops(tmp_path) -> None:
    before = len(_sampler_threads())
    callback = AccelkitCallback(CPU_PLAN, warmup=1, window=2)
    with pytest.raises(Boom, match="in training_step"):
        _trainer(tmp_path, callback, max_epochs=1).fit(Classifier(fail_at=3), separable(n=256))
    assert callback.report is None
    assert len(_sampler_threads()) <= before
    assert callback.meter.clock.steps == 3


def test_error_on_the_first_batch_is_the_users(tmp_path) -> None:
    callback = AccelkitCallback(CPU_PLAN)
    with pytest.raises(Boom):
        _trainer(tmp_path, callback, max_epochs=1).fit(Classifier(fail_at=0), separable(n=64))


def test_given_flops_are_not_counted(tmp_path) -> None:
    callback = AccelkitCallback(CPU_PLAN, flops_per_step=1e6, warmup=0, window=1)
    _trainer(tmp_path, callback, max_steps=3).fit(Classifier(), separable(n=256))
    assert callback.report.flops_per_step == 1e6
    assert callback.report.steps == 3


@pytest.mark.parametrize(
    ("gpu", "expected"),
    [
        (
            "A100-SXM4-80GB",
            {"precision": "bf16-mixed", "accelerator": "gpu", "devices": 1, "strategy": "auto"},
        ),
        (
            "Tesla T4",
            {"precision": "16-mixed", "accelerator": "gpu", "devices": 1, "strategy": "auto"},
        ),
        (None, {"precision": "32-true", "accelerator": "cpu", "devices": 1, "strategy": "auto"}),
    ],
)
def test_trainer_kwargs(gpu, expected) -> None:
    assert trainer_kwargs(accelkit.plan_for(gpu)) == expected


def test_trainer_kwargs_under_torchrun_is_ddp() -> None:
    environ = {
        "RANK": "0",
        "WORLD_SIZE": "16",
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "8",
        "MASTER_ADDR": "node0",
        "MASTER_PORT": "29500",
    }
    kwargs = trainer_kwargs(accelkit.plan_for("H100-SXM5-80GB", 8, environ=environ))
    assert kwargs == {
        "precision": "bf16-mixed",
        "accelerator": "gpu",
        "devices": 8,
        "strategy": "ddp",
    }


def test_cpu_trainer_kwargs_run_a_fit(tmp_path) -> None:
    callback = AccelkitCallback(CPU_PLAN, warmup=0, window=2)
    logger = pl.loggers.CSVLogger(tmp_path)
    kwargs = trainer_kwargs(CPU_PLAN)
    pl.Trainer(
        callbacks=[callback],
        logger=logger,
        max_steps=4,
        enable_progress_bar=False,
        enable_checkpointing=False,
        **kwargs,
    ).fit(Classifier(), separable(n=256))
    assert callback.report.steps == 4
