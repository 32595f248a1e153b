"""`AccelkitCallback`: the profiled-fit measurements for `lightning.Trainer.fit`.

Each training batch is one `accelkit.torch.Meter` step, opened in
`on_train_batch_start` and closed in `on_train_batch_end` (`_meter_steps`): forward,
backward and optimizer step are inside it, the data loading between batches is the
input wait. The first batch's FLOPs are counted through the module's own
`training_step` (forward + loss + backward, no optimizer step), under the
Trainer's precision. At every window boundary, where the meter synchronises the
device anyway, rank 0 logs the window's figures to the Trainer's loggers
(`accelkit.lightning.metrics`). Under DDP every rank closes its meter at the end of
the fit, so every rank's `report` holds the whole run's figures, and the gradient
all-reduce of the Trainer's `DistributedDataParallel` is timed as `accelkit.torch.fit`
times its own (`accelkit.torch.communication`), unless the strategy registered a
communication hook already (``DDPStrategy(ddp_comm_hook=...)``: said in the report's
notes) or ``ACCELKIT_COMM_TIMING=0``.
"""

from __future__ import annotations

import time
from typing import Any

from typing_extensions import override

from accelkit.lightning import metrics
from accelkit.lightning._flops import count_training_step
from accelkit.lightning._framework import lightning_pytorch
from accelkit.lightning._meter_steps import OpenStep
from accelkit.planning import Plan
from accelkit.profiling import mfu
from accelkit.profiling.run_report import RunReport
from accelkit.torch.distributed import trainer_timing
from accelkit.torch.measuring.facts import loader_facts
from accelkit.torch.measuring.meter import Meter

_Callback: Any = lightning_pytorch().Callback  # a base class read off a module: Any to mypy


class AccelkitCallback(_Callback):
    """Measures a Lightning fit; `callback.report` holds the `RunReport` once it ends.

    Args:
        plan: the plan in force (default: the last `auto_configure()` plan).
        flops_per_step: FLOPs of one step, if known; counted on the first batch otherwise.
        tokens_per_sample: for tokens/s (found automatically for integer (B, T) token ids).
        warmup: steps left out of steady-state figures (at least 1 when counting FLOPs).
        window: steps between device synchronisations, and between logged rows.
        sample_gpu: sample NVML in a background thread.
        calibrate: measure the achievable matmul rate after the fit.
        single_device: the same run on one device, for `report.scaling_efficiency`.

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
        ...     def configure_optimizers(self):
        ...         return torch.optim.SGD(self.parameters(), lr=0.1)
        >>> data = torch.utils.data.TensorDataset(torch.randn(256, 16), torch.randint(0, 4, (256,)))
        >>> callback = accelkit.lightning.AccelkitCallback()
        >>> trainer = lightning.Trainer(callbacks=[callback], max_epochs=1, logger=False,
        ...                             enable_checkpointing=False, enable_progress_bar=False,
        ...                             enable_model_summary=False)
        >>> trainer.fit(Classifier(), torch.utils.data.DataLoader(data, batch_size=32))
        >>> callback.report.steps
        8
    """

    def __init__(
        self,
        plan: Plan | None = None,
        *,
        flops_per_step: float | None = None,
        tokens_per_sample: int | None = None,
        warmup: int = 3,
        window: int = 50,
        sample_gpu: bool = True,
        calibrate: bool = False,
        single_device: Any = None,
    ) -> None:
        super().__init__()
        self._options = {
            "plan": plan,
            "flops_per_step": flops_per_step,
            "tokens_per_sample": tokens_per_sample,
            "warmup": warmup,
            "window": window,
            "sample_gpu": sample_gpu,
            "calibrate": calibrate,
            "single_device": single_device,
        }
        self.report: RunReport | None = None
        self.meter: Meter | None = None

    @override
    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        options = dict(self._options)
        # A manual-optimization training_step steps its optimizers: count it inline instead.
        inline = not getattr(pl_module, "automatic_optimization", True)
        self._count = options["flops_per_step"] is None and not inline
        if self._count:
            options["warmup"] = max(options["warmup"], 1)  # the counted step runs slower
        optimizers = getattr(trainer, "optimizers", None) or [None]
        self.meter = Meter(pl_module, count_flops=inline, optimizer=optimizers[0], **options)
        self.meter.on_window = self._log_window
        self._flops = options["flops_per_step"]
        self._peak = (
            mfu.peak(self.meter.plan.hardware, self.meter.plan.matmul_dtype).tflops
            if self.meter.device_label != "cpu"
            else None
        )
        loader = getattr(trainer, "train_dataloader", None)
        if loader is not None:
            self.meter.facts["loader"] = loader_facts(loader)
        self._steps = OpenStep(self.meter)
        self._trainer, self._epochs, self.report = trainer, 0, None
        self._loss_sum: Any = None  # this epoch's losses, summed on the device
        self._loss_steps = 0
        self._window_at = (0, time.perf_counter())  # (step, time) of the last boundary
        # Lightning's DDP strategies have wrapped the module by now
        trainer_timing.time_all_reduce(getattr(trainer.strategy, "model", None), self.meter)
        self.meter.start()

    @override
    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._count:
            self._count = False
            self._count_flops(trainer, pl_module, batch)
        self._steps.begin(batch)

    @override
    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._steps.end()
        loss: Any = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if getattr(loss, "ndim", None) == 0:  # summed where it lies: no sync per step
            loss = loss.detach().float()
            self._loss_sum = loss if self._loss_sum is None else self._loss_sum + loss
            self._loss_steps += 1

    @override
    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self._epochs += 1
        if self._loss_steps and self.meter is not None:  # one read per epoch, as the fit's
            self.meter.record_loss(float(self._loss_sum) / self._loss_steps)
        self._loss_sum, self._loss_steps = None, 0

    @override
    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        assert self.meter is not None  # made in on_train_start
        self._steps.end()
        self.meter.epochs = self._epochs
        self.report = self.meter.close()

    @override
    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        """The user's error goes on unchanged (Lightning re-raises it); the sampler stops.
        An interrupted fit (Ctrl-C) still gets its report, marked interrupted."""
        if self.meter is None or self.report is not None:
            return
        self._steps.abandon(exception)
        self.meter.epochs = self._epochs
        self.meter.__exit__(type(exception), exception, exception.__traceback__)
        if isinstance(exception, KeyboardInterrupt):
            self.report = self.meter.close()

    def _count_flops(self, trainer: Any, pl_module: Any, batch: Any) -> None:
        assert self.meter is not None  # made in on_train_start
        count = count_training_step(trainer, pl_module, batch)
        if count.total is None:
            self.meter.note("flops_per_step", "; ".join(count.notes))
            return
        self.meter.set_flops(count)
        self._flops = count.total

    def _log_window(self, step_s: float, step: int) -> None:
        assert self.meter is not None  # the meter calls this
        last_step, since = self._window_at
        self._window_at = (step, time.perf_counter())
        wait = self._steps.take_wait()
        if not self._trainer.is_global_zero:
            return
        row = metrics.window_figures(
            step_s=step_s,
            steps=step - last_step,
            samples=self.meter.last_batch_size,
            tokens=self._steps.tokens,
            flops=self._flops,
            peak_tflops=self._peak,
            input_wait_s=wait,
            gpu=self._steps.gpu_since(since),
        )
        for logger in self._trainer.loggers:
            logger.log_metrics(row, step=self._trainer.global_step)
