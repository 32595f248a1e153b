"""`AccelkitCallback`: the profiled-fit measurements for `lightning.Trainer.fit`, a thin
adapter of Lightning's hooks over `accelkit.torch.Meter` (and so over the one
measurement core, `accelkit.profiling.recorder.Recorder`).

Each training batch is one measured step, opened in `on_train_batch_start` and closed
in `on_train_batch_end` (`_meter_steps`): forward, backward and optimizer step are
inside it, the data loading between batches is the input wait. Everything else the
fit does is one of the run's other phases, told to the meter by Lightning's own
hooks: the sanity check and every validation are evaluation; the set-up before the
first step, each epoch's end and the checkpoints are the rest ("other"). Their time is
reported beside the training figures (`RunReport.evaluation_seconds`,
`other_seconds`) and counts in none of them: step time, samples/s, MFU and input wait
come from the training steps alone.

The first batch's FLOPs are counted as the Trainer trains it (`Meter`'s count on its
first step: forward, loss and backward under the Trainer's precision), so the module's
`training_step` runs only when the Trainer runs it, also with `tune` on. Rank 0 logs
the figures to the Trainer's loggers at the Trainer's ``log_every_n_steps``, in rows of
Lightning's own step and ``epoch``, named as every accelkit logger integration names
them (`accelkit.profiling.metrics`: ``accelkit/step_time_s``...); when the fit ends,
the last window and the whole run's figures (``accelkit/run/...``) (`_rows`). Under DDP every
rank closes its meter at the end of the fit, so every rank's `report` holds the whole
run's figures, and the gradient all-reduce of the Trainer's `DistributedDataParallel`
is timed as `accelkit.torch.fit` times its own
(`accelkit.torch.distributed.communication`), unless the strategy registered a
communication hook already (``DDPStrategy(ddp_comm_hook=...)``: said in the report's
notes) or ``ACCELKIT_COMM_TIMING=0``.
"""

from __future__ import annotations

from typing import Any

from typing_extensions import override

from accelkit.lightning._framework import lightning_pytorch
from accelkit.lightning._meter_steps import OpenStep
from accelkit.lightning._rows import LoggerRows
from accelkit.lightning._tune import step_counter, trials_for
from accelkit.planning import Plan
from accelkit.profiling.clock import EVALUATION, OTHER
from accelkit.profiling.options import MeterOptions
from accelkit.profiling.recorder import Recorder
from accelkit.profiling.run_report import RunReport
from accelkit.profiling.tuning import TuneResult
from accelkit.torch.distributed import trainer_timing
from accelkit.torch.measuring.facts import loader_facts
from accelkit.torch.measuring.meter import Meter
from accelkit.torch.tuning.in_trainer import TrainerTrials
from accelkit.torch.tuning.trials import check_mode

_Callback: Any = lightning_pytorch().Callback  # a base class read off a module: Any to mypy


class AccelkitCallback(_Callback):
    """Measures a Lightning fit; `callback.report` holds the `RunReport` once it ends.

    Args:
        plan: the plan in force (default: the last `auto_configure()` plan).
        tune: ``"auto"`` (default), True or False, as ``accelkit.torch.fit``'s: measure
            the fused optimizer and ``torch.compile`` of the module's ``training_step``
            (forward and loss; its children's forward where that fails) on the fit's
            first batches and keep the fastest that computes the same, until the fit
            ends (`accelkit.lightning._tune`); ``"auto"`` tunes GPU fits long enough to
            pay it back. ``report.tuning`` holds what was measured.
        **options: the measurement options of every door, checked here
            (`accelkit.profiling.options.MeterOptions`): ``flops_per_step`` (counted on
            the first batch otherwise), ``tokens_per_sample``, ``warmup``, ``window``
            (at most this many steps between device synchronisations),
            ``sample_gpu``, ``calibrate``, ``single_device``. The figures are logged at
            the Trainer's ``log_every_n_steps``, whatever ``window`` is (`_rows`).

    The callback runs the module's ``training_step`` only when the Trainer does: the FLOPs
    are counted on the first batch as it trains, and tune's check against the eager step
    runs on copies of the module (`accelkit.lightning._tune`).

    Raises:
        ValueError, TypeError: an option out of range, of the wrong type or unknown.

    Example:
        >>> import lightning
        >>> import torch
        >>> import accelkit.lightning
        >>> class Classifier(lightning.LightningModule):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.net = torch.nn.Linear(16, 4)
        ...     def training_step(self, batch, batch_idx):
        ...         x, y = batch
        ...         return torch.nn.functional.cross_entropy(self.net(x), y)
        ...     def validation_step(self, batch, batch_idx):
        ...         x, y = batch
        ...         self.log("val_loss", torch.nn.functional.cross_entropy(self.net(x), y))
        ...     def configure_optimizers(self):
        ...         return torch.optim.SGD(self.parameters(), lr=0.1)
        >>> data = torch.utils.data.TensorDataset(torch.randn(256, 16), torch.randint(0, 4, (256,)))
        >>> loader = torch.utils.data.DataLoader(data, batch_size=32)
        >>> callback = accelkit.lightning.AccelkitCallback(window=4)
        >>> trainer = lightning.Trainer(callbacks=[callback], max_epochs=1, logger=False,
        ...                             enable_checkpointing=False, enable_progress_bar=False,
        ...                             enable_model_summary=False)
        >>> trainer.fit(Classifier(), loader, loader)     # validation: not training
        >>> callback.report.steps, callback.report.evaluation_seconds > 0
        (8, True)
    """

    def __init__(self, plan: Plan | None = None, tune: bool | str = "auto", **options: Any) -> None:
        super().__init__()
        self.tune = check_mode(tune)
        self.options = MeterOptions.of(options, plan=plan)
        self._trials: TrainerTrials | None = None  # under way
        self._count_again = False  # the next step's FLOPs counted again (float8 kept)
        self._tuned: TrainerTrials | None = None  # what to undo when the fit ends
        self.report: RunReport | None = None
        self.meter: Meter | None = None
        self._steps: OpenStep | None = None
        self._rows: LoggerRows | None = None
        self._epochs = 0
        self._loss_sum: Any = None  # this epoch's losses, summed on the device
        self._loss_steps = 0

    # -- the fit ---------------------------------------------------------------------

    @override
    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        """The strategy has set up (the module on its device and wrapped, the optimizers
        made) and the sanity check is still to come: the meter starts here. It counts
        the first batch's FLOPs as that batch trains (no pass of its own)."""
        optimizers = getattr(trainer, "optimizers", None) or [None]
        self.meter = Meter(pl_module, optimizer=optimizers[0], **self.options.to_kwargs())
        self._steps = OpenStep(self.meter)
        self._rows = LoggerRows(self.meter, trainer)
        self._epochs, self.report = 0, None
        self._loss_sum, self._loss_steps = None, 0
        # Lightning's DDP strategies have wrapped the module by now
        trainer_timing.time_all_reduce(getattr(trainer.strategy, "model", None), self.meter)
        self._sharding_facts(trainer, pl_module)
        self._start_trials(trainer, pl_module)
        self.meter.start()
        self._pause(OTHER)  # the set-up, until the first step

    @override
    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        loader = getattr(trainer, "train_dataloader", None)  # made by now, not at fit start
        if self.meter is not None and loader is not None:
            self.meter.facts["loader"] = loader_facts(loader)

    @override
    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._steps is None or self.report is not None:
            return
        self._steps.begin(batch)
        if self._trials is not None:
            self._trials.begin()
            self._trials.batch((batch, batch_idx))  # what `_tune`'s check runs on

    @override
    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._steps is None or self.report is not None:
            return
        assert self._rows is not None  # made with the steps
        if self._count_again:  # the first step after trials that kept float8
            assert self.meter is not None
            self._count_again = False
            self.meter.count_again([batch], step_counter(trainer, pl_module))
        self._steps.end()
        if self._trials is not None:
            self._trials.end()
            self._keep_trials()
        self._rows.batch_end()
        loss: Any = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if getattr(loss, "ndim", None) == 0:  # summed where it lies: no sync per step
            loss = loss.detach().float()
            self._loss_sum = loss if self._loss_sum is None else self._loss_sum + loss
            self._loss_steps += 1

    @override
    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if self.meter is None or self.report is not None:
            return
        self._pause(OTHER)  # the epoch's boundary, until the next step
        self._epochs += 1
        if self._loss_steps:  # one read per epoch, as the fit's
            self.meter.record_loss(self._loss_scale(trainer, pl_module) * self._loss_mean())
        self._loss_sum, self._loss_steps = None, 0

    @override
    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if self.meter is None or self._steps is None or self.report is not None:
            return
        assert self._rows is not None  # made with the meter
        self._steps.end()
        if self._trials is not None:
            self._trials.stop()
            self._keep_trials()
        self.meter.epochs = self._epochs
        self.report = self._rows.fit_end(self.meter.close)

    @override
    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        """The user's error goes on unchanged (Lightning re-raises it); the sampler stops.
        An interrupted fit (Ctrl-C) still gets its report, marked interrupted; what tune
        had on goes off."""
        self._undo_tune()
        if self.meter is None or self._steps is None or self.report is not None:
            return
        self._keep_trials()
        self._steps.abandon(exception)
        self.meter.epochs = self._epochs
        self.meter.__exit__(type(exception), exception, exception.__traceback__)
        if isinstance(exception, KeyboardInterrupt):
            self.report = self.meter.close()

    def _sharding_facts(self, trainer: Any, pl_module: Any) -> None:
        """The strategy's sharding as the fit records its own (``facts["sharding"]``):
        FSDP2 (``fully_shard`` in ``configure_model``, under ModelParallelStrategy) or
        FSDP1 (FSDPStrategy: kind "fsdp1"); or, when the plan shards and the module is
        whole, a note saying so."""
        from accelkit.torch.distributed import sharding

        assert self.meter is not None
        model = getattr(trainer.strategy, "model", None) or pl_module
        found = sharding.described(pl_module) or sharding.described(model)
        record = found.to_dict() if found is not None else sharding.described_fsdp1(model)
        if record is not None:
            self.meter.facts["sharding"] = record
        elif self.options.plan is not None and sharding.wanted(self.options.plan):
            strategy = type(trainer.strategy).__name__
            self.meter.note(
                "sharding",
                f"the plan shards with FSDP2, not applied: the Trainer's {strategy} did not "
                "shard (trainer_kwargs gives FSDPStrategy on GPU plans only: Lightning "
                "shards only on GPUs)",
            )

    # -- tune ------------------------------------------------------------------------

    def _start_trials(self, trainer: Any, pl_module: Any) -> None:
        """The trials of `tune` on the fit's first batches (`accelkit.lightning._tune`)."""
        assert self.meter is not None
        self._trials, self.meter.tuning = None, None
        if self.tune is False:
            return
        found = trials_for(trainer, pl_module, self.tune, self.meter)
        if isinstance(found, TuneResult):
            self.meter.tuning = found.to_dict()
            return
        self._trials = self._tuned = found
        self._keep_trials()

    @override
    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """The fit is over: what tune kept goes off (a later fit or test runs the module
        as the script made it, and tunes afresh)."""
        self._undo_tune()

    def _undo_tune(self) -> None:
        if self._tuned is not None:
            self._tuned.undo()
            self._tuned = None

    def _keep_trials(self) -> None:
        """Once the trials end: their record in the report; the kept candidate trains on."""
        if self._trials is None or self._trials.result is None:
            return
        assert self.meter is not None
        self.meter.tuning = self._trials.result.to_dict()
        self._count_again = self._trials.result.float8  # its float8 share
        self._trials = None

    # -- the run's other phases ------------------------------------------------------

    @override
    def on_sanity_check_start(self, trainer: Any, pl_module: Any) -> None:
        self._pause(EVALUATION)

    @override
    def on_sanity_check_end(self, trainer: Any, pl_module: Any) -> None:
        self._pause(OTHER)  # the set-up goes on until the first step

    @override
    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        self._pause(EVALUATION)

    @override
    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if not trainer.sanity_checking:  # on_sanity_check_end says what comes next
            self._resume()

    @override
    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: Any) -> None:
        """Saving is the rest of the run; one saved during a phase stays in that phase."""
        recorder = self._recorder()
        if recorder is not None and recorder.clock.paused is None:
            recorder.pause(OTHER)

    def _recorder(self) -> Recorder | None:
        """The meter's recorder while the fit is measured; None before and after."""
        return self.meter.recorder if self.meter is not None and self.report is None else None

    def _pause(self, phase: str) -> None:
        """Training time stops until `_resume` or the next step (`Recorder.pause`)."""
        if (recorder := self._recorder()) is not None:
            recorder.pause(phase)

    def _resume(self) -> None:
        if (recorder := self._recorder()) is not None:
            recorder.resume()

    # -- figures ---------------------------------------------------------------------

    def _loss_mean(self) -> float:
        return float(self._loss_sum) / self._loss_steps

    @staticmethod
    def _loss_scale(trainer: Any, pl_module: Any) -> int:
        """What undoes Lightning's division of the loss it hands `on_train_batch_end`:
        under automatic optimization it is the loss divided by `accumulate_grad_batches`
        for backward (`ClosureResult.from_training_step_output`); the user's loss is
        what the report holds."""
        if not getattr(pl_module, "automatic_optimization", True):
            return 1
        return int(getattr(trainer, "accumulate_grad_batches", 1) or 1)
