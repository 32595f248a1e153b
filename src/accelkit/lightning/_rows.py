"""`LoggerRows`: accelkit's figures in the rows of a Lightning fit's loggers, at the
Trainer's own cadence, step and epoch.

Lightning writes what ``self.log`` gathered in a training batch to its loggers every
``Trainer(log_every_n_steps=...)`` steps (its count of batches that stepped an
optimizer; a micro-batch of ``accumulate_grad_batches`` never), in a row at that
step with the batch's ``epoch``. The callback's rows follow it:

- at each batch whose row Lightning writes: the window figures of the training since
  the previous row (`Meter.take_figures(close=True)`), as ``accelkit/step_time_s``...;
- when the fit ends, at the last batch's step: the last window (the steps since the
  last row; none where Lightning logs no steps, ``log_every_n_steps=0``) and the whole
  run's figures under their own names (``accelkit/run/mfu``...,
  `accelkit.profiling.metrics.run_figures`), so every ``accelkit/<figure>`` series
  holds windows only, to the end.

The run's figures go where every Lightning logger keeps a run's numbers, in
``log_metrics``: a CSV row, a TensorBoard tag of one point, a W&B key (whose run
summary holds its last value), an MLflow metric. ``log_hyperparams`` would reach
TensorBoard's hparams tab only, and is where the run's settings go, not its results.

Closing the window at each row synchronises the device; Lightning reads the values
logged in that batch with ``.item()`` a moment later (the loss of a ``training_step``
that logs it), so it costs no wait of its own. A fit that logs nothing per step pays
one synchronisation every ``log_every_n_steps`` steps (50 by default, as ``window``).

The figures go to each logger's ``log_metrics`` directly, as Lightning's logger
connector hands over its own, not through ``LightningModule.log``: a value given to
``self.log`` stays in the fit's results and is written again in every later row, so a
figure missing from one window (the GPU figures of a window in which the NVML sampler
took no sample) would repeat the last window's. Rank 0 writes (the rows of every
Lightning logger are rank 0's); every rank closes its own windows alike.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from accelkit.profiling import metrics

if TYPE_CHECKING:
    from accelkit.profiling.run_report import RunReport


class LoggerRows:
    """Writes a `Meter`'s figures to `trainer`'s loggers (see the module's docstring).

    Args:
        meter: the fit's `accelkit.torch.Meter`.
        trainer: the Lightning `Trainer` being fitted.
    """

    def __init__(self, meter: Any, trainer: Any) -> None:
        self.meter = meter
        self.trainer = trainer
        self._last: tuple[int, int] | None = None  # the last batch's (step, epoch)

    def batch_end(self) -> None:
        """A training batch has ended: where Lightning writes its row, the windows since
        the last row go in a row of the same step and epoch."""
        trainer = self.trainer
        if not trainer.loggers:
            return
        self._last = (_row_step(trainer), int(trainer.current_epoch))
        if _logs_this_batch(trainer):
            self._write(metrics.spelled(self.meter.take_figures(close=True), "lightning"))

    def fit_end(self, close: Callable[[], RunReport]) -> RunReport:
        """The fit has ended: `close` builds the report; the last window and the run's
        figures go in one row at the last batch's step."""
        logging = bool(self.trainer.loggers) and self._last is not None
        last: dict[str, float] = {}
        if logging and self.trainer.log_every_n_steps:
            last = self.meter.take_figures(close=True)
        report = close()
        if logging:
            run = metrics.spelled(metrics.run_figures(report), "lightning", run=True)
            self._write({**metrics.spelled(last, "lightning"), **run})
        return report

    def _write(self, figures: Mapping[str, float]) -> None:
        """One row at the last batch's step, with its epoch, as Lightning writes its own
        (`_LoggerConnector.log_metrics`: ``log_metrics``, then ``save``)."""
        if not figures or self._last is None or not self.trainer.is_global_zero:
            return
        step, epoch = self._last
        for logger in self.trainer.loggers:
            logger.log_metrics({**figures, "epoch": epoch}, step=step)
            logger.save()


def _row_step(trainer: Any) -> int:
    """The step of the batch that just ended in Lightning's rows: the batches that
    stepped before it (`_TrainingEpochLoop._batches_that_stepped`, which its logger
    connector writes; ``global_step`` counts optimizer steps, one per optimizer, and
    has counted this batch's already)."""
    loop = getattr(trainer.fit_loop, "epoch_loop", None)
    stepped = getattr(loop, "_batches_that_stepped", None)
    return int(stepped) if stepped is not None else max(int(trainer.global_step) - 1, 0)


def _logs_this_batch(trainer: Any) -> bool:
    """Whether Lightning writes the row of the batch that just ended
    (`_LoggerConnector.update_train_step_metrics` and ``should_update_logs``)."""
    every = int(trainer.log_every_n_steps or 0)
    if not every:
        return False
    accumulating = getattr(trainer.fit_loop, "_should_accumulate", None)
    module = trainer.lightning_module
    if accumulating is not None and accumulating() and module.automatic_optimization:
        return False  # a micro-batch: Lightning writes no row
    return (_row_step(trainer) + 1) % every == 0 or bool(trainer.should_stop)
