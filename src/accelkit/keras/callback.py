"""`ProfileCallback`: the profiled-fit measurements for any `model.fit`.

Keras' TensorFlow trainer fetches each batch inside its compiled train function,
where no host timer can see the wait. The callback therefore replaces
`model.train_function` with one that takes the batch from the iterator in Python
(timed: that is the input wait), counts the first batch's FLOPs, and hands the
batch to Keras' own compiled step through the path Keras uses for Python
iterators. The step itself is unchanged. With `steps_per_execution > 1` only the
first call goes that way; later calls run Keras' compiled loop as they are and
count the batches it runs (`accelkit.keras.train_function`).

The timing, the NVML figures, the precision the layers ran in and the checks
work on any Keras backend. What reads TensorFlow itself is measured on the
TensorFlow backend only (on JAX or PyTorch backends the report says so under
`notes`): the input wait (the TensorFlow trainer's train function), FLOP counting
(TensorFlow's graph profiler), device memory, TF32, strategies and multi-worker
figures, calibration.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import keras
import numpy as np

from accelkit.configure import current_plan
from accelkit.hardware import detect, environment
from accelkit.keras import batches, checks, head, strategies
from accelkit.keras.epoch_logs import EpochClock
from accelkit.keras.facts import device_label, loss_scale
from accelkit.keras.train_function import StepCounter
from accelkit.planning import Plan, Request
from accelkit.planning import plan as make_plan
from accelkit.profiling import mfu, world
from accelkit.profiling.assemble import Measurements
from accelkit.profiling.flop_count import FlopCount
from accelkit.profiling.run_report import RunReport
from accelkit.profiling.sampler import NvmlSampler
from accelkit.report.assemble import build_report, with_advice
from accelkit.utils import arguments

# single_device=, and the name it had before accelkit.torch.fit's was chosen for both.
SINGLE_DEVICE = ("single_device", "single_device_samples_per_second")


class ProfileCallback(keras.callbacks.Callback):
    """Measures a Keras fit; `callback.report` holds the `RunReport` once it ends.

    Args:
        plan: the plan in force (default: the last `auto_configure()` plan).
        flops_per_step: FLOPs of one step, if known; counted from the first batch otherwise.
        tokens_per_sample: for tokens/s (found automatically for integer (B, T) inputs).
        warmup: steps left out of steady-state figures (tracing, autotuning).
        window: steps between device synchronisations.
        sample_gpu: sample NVML in a background thread.
        calibrate: measure the achievable matmul rate after the run.
        single_device: the same training on one device, for `report.scaling_efficiency`:
            samples/s, a `RunReport` or the path of a saved one
            (``single_device_samples_per_second=`` is its former name).
        allow_float_ids: True (the default): token ids rounded by a 16-bit float are a
            critical verdict in the report; False: the fit stops with
            `accelkit.keras.checks.UnsafeMixedPrecision` at the first batch that shows them
            (`accelkit.keras.fit` passes False unless told otherwise).

    At each epoch's end the callback adds the epoch's figures to Keras' ``logs``
    (``accelkit_samples_per_second``, ``accelkit_tokens_per_second``, ``accelkit_mfu``,
    ``accelkit_input_wait_share``; see `accelkit.keras.epoch_logs`), so `History`,
    `CSVLogger` and `TensorBoard` record them. Keras calls callbacks in list order
    with one ``logs`` dict: put this callback before `CSVLogger` and `TensorBoard`
    (`accelkit.keras.fit` puts it first).

    Under a distribution strategy the figures are this process's: its replicas'
    samples (MirroredStrategy: all of them). Under MultiWorkerMirroredStrategy each
    worker measures itself, and at the end of the fit the workers exchange their
    figures (one small all-gather), so every worker's report has `world_size`,
    `ranks`, `slowest_rank` and `global_samples_per_second` for the whole cluster.

    Attributes:
        facts: what the advisor reads besides the figures (layer sizes, dtype policy,
            loss scale, input pipeline...; see `accelkit.advisor.context`); add your own
            before the fit, e.g. ``callback.facts["loader"] = {"type": "PyDataset", ...}``.

    Example:
        >>> import accelkit
        >>> import keras
        >>> import numpy as np
        >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        >>> model.compile(optimizer="adam", loss="mse")
        >>> callback = accelkit.keras.ProfileCallback(window=4)
        >>> history = model.fit(np.zeros((256, 4)), np.zeros((256, 2)), epochs=2, verbose=0,
        ...                     callbacks=[callback])
        >>> callback.report.steps
        16
        >>> print(callback.report)  # doctest: +SKIP
        accelkit run: tensorflow, sequential on cpu, precision fp32 (matmuls fp32), 16 steps ...
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
        single_device: float | RunReport | str | None = None,
        single_device_samples_per_second: float | RunReport | str | None = None,
        allow_float_ids: bool = True,
    ) -> None:
        super().__init__()
        if warmup < 0 or window < 1:
            raise ValueError(f"warmup={warmup} must be >= 0 and window={window} >= 1")
        self.single_device_samples_per_second = world.single_device_rate(
            arguments.renamed(single_device, single_device_samples_per_second, SINGLE_DEVICE)
        )
        self.plan = plan
        self.flops_per_step = flops_per_step
        self.tokens_per_sample = tokens_per_sample
        self.warmup, self.window = warmup, window
        self.sample_gpu, self.calibrate = sample_gpu, calibrate
        self.allow_float_ids = allow_float_ids
        self.report: RunReport | None = None
        self.interrupted = False
        self._notes: dict[str, str] = {}
        self.facts: dict[str, Any] = {}

    # -- Keras hooks -----------------------------------------------------------------

    def on_train_begin(self, logs: Any = None) -> None:
        self.plan = self._plan = (  # _plan: the same, never None while fitting
            self.plan
            or current_plan("tensorflow")
            or make_plan(detect(), Request(framework="tensorflow"))
        )
        # Token ids through a 16-bit float, 16-bit outputs: critical verdicts in the report.
        self.facts.update(checks.mixed_precision_facts(self.model))
        self._tf = _tensorflow()
        self._gpus = (
            self._tf.config.list_physical_devices("GPU")
            if self._tf is not None
            else list(self.plan.hardware.gpus)
        )
        self._flops: FlopCount | None = None
        self._count_first = self.flops_per_step is None
        self._batch: tuple[int | None, int] = (None, 0)  # (samples, tokens) of the last batch
        self._losses: list[float] = []
        self._epochs = 0
        self._first_batch_size: int | None = None
        self._scales: list[list[float]] = []
        self._read_scale(0, initial=True)
        self.report = None
        self.clock = EpochClock(self._sync, warmup=self.warmup, window=self.window)
        self._peak: mfu.Peak | None = None
        nvml = [g.index for g in self.plan.hardware.gpus[: len(self._gpus)]]
        self._sampler = NvmlSampler(nvml if self.sample_gpu and self._gpus else [])
        if self._gpus and self._tf is not None:
            self._tf.config.experimental.reset_memory_stats("GPU:0")
        self._wrap_train_function()
        self._sampler.start()

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self._steps.epoch_begin((self.params or {}).get("steps"))

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self._epochs = epoch + 1
        if logs and "loss" in logs:
            self._losses.append(float(logs["loss"]))
        self._read_scale(self.clock.steps)
        if logs is not None:  # for the callbacks after this one: CSVLogger, History...
            logs.update(self._epoch_logs())

    def _epoch_logs(self) -> dict[str, float]:
        """The figures of the windows that ended in this epoch (`keras.epoch_logs`)."""
        if self._peak is None:
            from accelkit.hardware.capabilities import matmul_dtype

            hardware = (
                self._plan.hardware
                if self._gpus
                else environment.cpu_host(self._plan.hardware.launcher)
            )
            precision = head.precision_ran(self.model, self._plan) or self._plan.precision
            self._peak = mfu.peak(
                hardware, matmul_dtype(precision, self._tf32_enabled()), devices=self._replicas()
            )
        flops = self.flops_per_step or (self._flops.total if self._flops is not None else None)
        return self.clock.epoch_logs(flops, self._peak.tflops, set(self._notes))

    def _read_scale(self, step: int, initial: bool = False) -> None:
        """The loss scale of a LossScaleOptimizer (mixed_float16), once per epoch."""
        scale = loss_scale(getattr(self.model, "optimizer", None), initial=initial)
        if scale is not None:
            self._scales.append([step, scale])

    def on_train_end(self, logs: Any = None) -> None:
        self.finish()

    def finish(self) -> RunReport:
        """Stop the sampler and build the report (idempotent)."""
        if self.report is None:
            self._sampler.stop()
            self._restore_train_function()
            self.report = self._build()
        return self.report

    def stop_sampler(self) -> None:
        """For a fit that raised: stop measuring, build nothing (a fit that raised before
        it began has nothing to stop)."""
        sampler = getattr(self, "_sampler", None)
        if sampler is not None:
            sampler.stop()
        self._restore_train_function()

    # -- the train function ------------------------------------------------------------

    # No per-batch hook: Keras (JAX) then keeps its async dispatch instead of waiting for
    # each step's logs. Steps are counted where Keras calls its train function
    # (`accelkit.keras.train_function`), every batch of a multi-step call included.

    def _wrap_train_function(self) -> None:
        if self._count_first and self._tf is None:
            self._notes["flops_per_step"] = (
                f"counted on the TensorFlow backend only (Keras runs on "
                f"{keras.config.backend()}): pass flops_per_step="
            )
            self._count_first = False
        elif self._count_first and getattr(self.model, "run_eagerly", False):
            self._notes["flops_per_step"] = (
                "not counted with run_eagerly=True: pass flops_per_step="
            )
            self._count_first = False
        self._steps = StepCounter(
            self.model,
            self.clock,
            self._tf,
            tokens_per_sample=self.tokens_per_sample,
            first_batch=self._first_batch,
            notes=self._notes,
        )
        self._steps.wrap()

    def _first_batch(self, data: Any, samples: int | None) -> None:
        """Once per fit: its batch size, the 16-bit checks, the FLOP count."""
        self._first_batch_size = samples
        # Integers past float16's exact range fed to a float input: a fact, or an error.
        x, _, _ = keras.utils.unpack_x_y_sample_weight(batches.first_replica(data))
        if found := checks.check_first_batch(x, self.model, allow_float_ids=self.allow_float_ids):
            self.facts["ids_over_float16"] = found
        if self._count_first:
            self._count_first = False
            self._flops = self._count(data)

    def _restore_train_function(self) -> None:
        steps = getattr(self, "_steps", None)
        if steps is not None:
            steps.restore()

    def _count(self, data: Any) -> FlopCount:
        from accelkit.profiling.flops_tensorflow import count_train_step_flops

        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(batches.first_replica(data))
        count = count_train_step_flops(self.model, x, y, sample_weight=sample_weight)
        replicas = self._replicas()
        if count.total is None or replicas == 1:
            return count
        return dataclasses.replace(  # every replica runs the step on its own batch
            count,
            total=count.total * replicas,
            forward=(count.forward or 0) * replicas,
            method=f"{count.method}, x {replicas} replicas",
        )

    def _replicas(self) -> int:
        """Replicas this process drives (under MultiWorkerMirroredStrategy, this worker's)."""
        if self._tf is None:
            return 1
        return strategies.local_replicas(self.model.distribute_strategy)

    def _sync(self) -> None:
        """Wait for queued device work: reading a loss value of the last step does."""
        logs = self._steps.last_logs
        if isinstance(logs, tuple):  # the JAX trainer returns (logs, state)
            logs = logs[0]
        if logs:
            np.asarray(next(iter(logs.values())))
        if self.clock.warmup_end is not None:  # from here on the sampler keeps totals
            self._sampler.keep_totals_from(self.clock.warmup_end)

    # -- report ------------------------------------------------------------------------

    def _build(self) -> RunReport:
        summary = self.clock.finish()
        plan = self._plan
        hardware = plan.hardware if self._gpus else environment.cpu_host(plan.hardware.launcher)
        notes = dict(self._notes)
        if self._sampler.notes:
            notes["gpu_utilization"] = "; ".join(self._sampler.notes)
        replicas = self._replicas()
        try:
            facts = self._facts(replicas)
        except Exception as error:  # noqa: BLE001 - facts feed advice, never fail a run
            facts = {"facts_error": f"{type(error).__name__}: {error}"}
        names = [gpu.name for gpu in plan.hardware.gpus]
        device = device_label(replicas, len(self._gpus), names[0] if names else None)
        report = build_report(
            Measurements(
                framework="tensorflow",
                model=self.model.name,
                device=device,
                plan=plan,
                hardware=hardware,
                clock=summary,
                precision=head.precision_ran(self.model, plan),
                tf32_enabled=self._tf32_enabled(),
                devices=replicas,
                flops=self._flops,
                flops_per_step=self.flops_per_step,
                sampler=self._sampler.summary(self.clock.warmup_end, None),
                peak_memory_bytes=(
                    int(self._tf.config.experimental.get_memory_info("GPU:0")["peak"])
                    if self._gpus and self._tf is not None
                    else None
                ),
                calibration=self._calibrate() if self.calibrate else None,
                epochs=self._epochs,
                losses=self._losses,
                interrupted=self.interrupted,
                notes=notes,
                facts=facts,
                single_device_samples_per_second=self.single_device_samples_per_second,
            )
        )
        if "input_wait_share" in notes:  # the clock saw no wait where none was timed
            report.input_wait_share = None
        if not self._gpus:
            report.note("peak_memory_bytes", "CPU run: device memory is not tracked")
        elif self._tf is None:
            report.note("peak_memory_bytes", "read on the TensorFlow backend only")
        strategy = getattr(self.model, "distribute_strategy", None)
        if self._tf is not None and strategies.is_multi_worker(strategy):
            ranks = strategies.gather_world(
                report, strategy, summary.steady_samples, replicas, interrupted=self.interrupted
            )
            if ranks is not None:
                world.aggregate(report, ranks, self.single_device_samples_per_second)
                with_advice(report, hardware, plan)
        return report

    def _facts(self, replicas: int) -> dict[str, Any]:
        from accelkit.keras.facts import model_facts

        facts = model_facts(self.model)
        facts.update(
            devices_used=replicas,
            visible_gpus=len(self._gpus),
            distributed=replicas > 1
            or (
                self._tf is not None
                and int(self.model.distribute_strategy.num_replicas_in_sync) > 1
            ),
        )
        if self._first_batch_size:
            facts["batch_size"] = self._first_batch_size
        if self.params and self.params.get("steps"):
            facts["steps_per_epoch"] = int(self.params["steps"])
        if self._scales and self._scales[0][0] == 0:
            facts["loss_scale"] = {"initial": self._scales[0][1], "history": self._scales[1:]}
        facts.update(self.facts)  # the caller's facts win
        return facts

    def _tf32_enabled(self) -> bool:
        return (
            bool(self._gpus)
            and self._tf is not None
            and self._tf.config.experimental.tensor_float_32_execution_enabled()
        )

    def _calibrate(self) -> Any:
        if self._tf is None:
            self._notes["calibrated_tflops"] = "calibrated on the TensorFlow backend only"
            return None
        from accelkit.profiling import calibrate

        measure = calibrate.matmul_tflops_tensorflow
        return calibrate.for_run(measure, self._plan.precision, self._tf32_enabled(), self._notes)


def _tensorflow() -> Any:
    """TensorFlow when Keras runs on it, else None (imported only then)."""
    if keras.config.backend() != "tensorflow":
        return None
    import tensorflow

    return tensorflow
