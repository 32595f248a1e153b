"""The callback's rows in real Lightning loggers (CSVLogger, TensorBoardLogger) on the
CPU: at the Trainer's ``log_every_n_steps``, in rows of Lightning's own step and epoch;
every ``accelkit/<figure>`` series windows to the end; the run's figures under their
own names (``accelkit/run/<figure>``), once."""

from __future__ import annotations

import csv

import pytest

from accelkit.profiling.metrics import spell

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
pl = pytest.importorskip("lightning.pytorch")

from accelkit.lightning import AccelkitCallback

from ..helpers.torch_data import CPU_PLAN, separable

STEP_TIME = spell("step_time_s", "lightning")
SAMPLES = spell("samples_per_second", "lightning")
RUN_STEP_TIME = spell("step_time_s", "lightning", run=True)
BATCH = 32


class Classifier(pl.LightningModule):
    """16 -> 4 logistic regression that logs its loss every step, as most modules do."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(16, 4)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit(loggers, **kwargs) -> AccelkitCallback:
    """A fit of 10 batches an epoch, one step of warm-up, logging to `loggers`."""
    callback = AccelkitCallback(CPU_PLAN, tune=False, warmup=1, window=4, sample_gpu=False)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        callbacks=[callback],
        logger=loggers,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **kwargs,
    )
    trainer.fit(Classifier(), separable(n=320, batch=BATCH))
    return callback


def _rows(logger) -> list[dict[str, str]]:
    with open(logger.experiment.metrics_file_path) as file:
        return list(csv.DictReader(file))


def _steady_seconds(points: list[tuple[int, float]], warmup: int) -> float:
    """The training seconds of windows (Lightning step, step time) that follow each other:
    each holds the batches since the previous row (the first: since the warm-up)."""
    seconds, last = 0.0, warmup - 1
    for step, step_time in points:
        seconds += (step - last) * step_time
        last = step
    return seconds


def test_rows_follow_log_every_n_steps_with_the_epoch_and_end_on_a_window(tmp_path) -> None:
    csv_logger = pl.loggers.CSVLogger(tmp_path, name="csv")
    callback = _fit([csv_logger], max_epochs=2, log_every_n_steps=3)
    rows = _rows(csv_logger)
    lightnings = [(int(r["step"]), int(r["epoch"])) for r in rows if r.get("train_loss")]
    ours = [(int(r["step"]), int(r["epoch"])) for r in rows if r.get(STEP_TIME)]
    assert lightnings == [(2, 0), (5, 0), (8, 0), (11, 1), (14, 1), (17, 1)]
    # Lightning's rows, then the last window at the last batch's step, epoch filled
    assert ours == [*lightnings, (19, 1)]
    for row in rows:
        if row.get(STEP_TIME):
            assert float(row[SAMPLES]) * float(row[STEP_TIME]) == pytest.approx(BATCH)
    # The windows follow each other to the end: their seconds are the run's steady seconds.
    points = [(int(r["step"]), float(r[STEP_TIME])) for r in rows if r.get(STEP_TIME)]
    report = callback.report
    assert _steady_seconds(points, warmup=1) == pytest.approx(report.steady_seconds, rel=1e-6)
    # The run's figures: once, in the last row, under their own names.
    (run,) = [r for r in rows if r.get(RUN_STEP_TIME)]
    assert (int(run["step"]), int(run["epoch"])) == (19, 1)
    assert float(run[RUN_STEP_TIME]) == pytest.approx(report.step_time_s)
    assert float(run[spell("flops_per_step", "lightning", run=True)]) == report.flops_per_step
    assert float(run[spell("advice_count", "lightning", run=True)]) == len(report.advice)
    assert spell("flops_per_step", "lightning") not in rows[0]  # no run figure as a window


def test_tensorboard_series_hold_windows_and_the_run_its_own_tags(tmp_path) -> None:
    pytest.importorskip("tensorboard", reason="TensorBoardLogger needs it")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tensorboard = pl.loggers.TensorBoardLogger(tmp_path, name="tb", default_hp_metric=False)
    callback = _fit([tensorboard], max_epochs=1, log_every_n_steps=4)
    (events,) = tmp_path.rglob("events.out.tfevents*")
    accumulator = EventAccumulator(str(events))
    accumulator.Reload()
    scalars = {
        tag: [(e.step, e.value) for e in accumulator.Scalars(tag)]
        for tag in accumulator.Tags()["scalars"]
    }
    report = callback.report
    points = scalars[STEP_TIME]
    assert [step for step, _ in points] == [3, 7, 9]  # every 4 steps, then the last batch
    assert _steady_seconds(points, warmup=1) == pytest.approx(report.steady_seconds, rel=1e-5)
    assert scalars[RUN_STEP_TIME] == [(9, pytest.approx(report.step_time_s, rel=1e-6))]
    run = {tag for tag in scalars if tag.startswith("accelkit/run/")}
    assert {RUN_STEP_TIME, spell("flops_per_step", "lightning", run=True)} <= run
    assert spell("flops_per_step", "lightning") not in scalars
    assert spell("advice_count", "lightning") not in scalars
    assert [step for step, _ in scalars["epoch"]][-1] == 9


def test_accumulation_rows_are_lightnings_steps(tmp_path) -> None:
    csv_logger = pl.loggers.CSVLogger(tmp_path, name="csv")
    _fit([csv_logger], max_epochs=1, accumulate_grad_batches=2, log_every_n_steps=2)
    rows = _rows(csv_logger)
    lightnings = [(int(r["step"]), int(r["epoch"])) for r in rows if r.get("train_loss")]
    ours = [(int(r["step"]), int(r["epoch"])) for r in rows if r.get(STEP_TIME)]
    assert lightnings == [(1, 0), (3, 0)]  # 5 optimizer steps: rows at the 2nd and 4th
    assert ours == [*lightnings, (4, 0)]


def test_no_step_rows_no_windows_the_run_still(tmp_path) -> None:
    csv_logger = pl.loggers.CSVLogger(tmp_path, name="csv")
    callback = _fit([csv_logger], max_epochs=1, log_every_n_steps=0)
    rows = _rows(csv_logger)
    assert not any(r.get(STEP_TIME) for r in rows)
    (run,) = [r for r in rows if r.get(RUN_STEP_TIME)]
    assert float(run[RUN_STEP_TIME]) == pytest.approx(callback.report.step_time_s)
