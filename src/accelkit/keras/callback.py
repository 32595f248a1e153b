"""`ProfileCallback`: the profiled-fit measurements for any `model.fit`.

Keras' TensorFlow trainer fetches each batch inside its compiled train function,
where no host timer can see the wait. The callback therefore replaces
`model.train_function` with one that takes the batch from the iterator in Python
(timed: that is the input wait), counts the first batch's FLOPs, and hands the
batch to Keras' own compiled step through the path Keras uses for Python
iterators. The step itself is unchanged. With `steps_per_execution > 1` only the
first call goes that way; later calls run Keras' compiled loop as they are and
count the batches it runs (`accelkit.keras.train_function`).

Each steady step whose batch it sees gets the FLOPs of its own batch's shapes
(`accelkit.profiling.flops_shapes`): a new shape is counted on one sample of it, apart
from the training time; the steps of Keras' compiled loop, whose batches it does not
see, fall back on the first batch's count, and the report's note says so.

The timing, the NVML figures, the precision the layers ran in and the checks
work on any Keras backend. What reads TensorFlow itself is measured on the
TensorFlow backend only (on JAX or PyTorch backends the report says so under
`notes`): the input wait (the TensorFlow trainer's train function), FLOP counting
(TensorFlow's graph profiler), device memory, TF32, strategies and multi-worker
figures, calibration.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import MutableMapping
from typing import Any

import keras
import numpy as np

from accelkit.configure import current_plan
from accelkit.frameworks import keras_train_step as loss_scaling
from accelkit.hardware import detect, environment
from accelkit.keras import batches, checks, head, strategies
from accelkit.keras.facts import device_label, loss_scale, weights_finite
from accelkit.keras.train_function import StepCounter, steps_per_execution
from accelkit.planning import Plan, Request
from accelkit.planning import plan as make_plan
from accelkit.profiling import metrics, world
from accelkit.profiling.assemble import Measurements
from accelkit.profiling.clock import EVALUATION, OTHER
from accelkit.profiling.flop_count import FlopCount, StepFlops
from accelkit.profiling.flops_shapes import ShapeFlops
from accelkit.profiling.options import MeterOptions
from accelkit.profiling.recorder import Recorder
from accelkit.profiling.run_report import RunReport
from accelkit.report.assemble import build_report, with_advice
from accelkit.utils import arguments

_log = logging.getLogger("accelkit")
# single_device=, and the name it had before accelkit.torch.fit's was chosen for both.
SINGLE_DEVICE = ("single_device", "single_device_samples_per_second")
# The measurement options a door takes by name (`MeterOptions`; the plan is positional).
OPTIONS = tuple(f.name for f in dataclasses.fields(MeterOptions) if f.name != "plan")


def measurement_options(kwargs: MutableMapping[str, Any]) -> dict[str, Any]:
    """Take the `MeterOptions` names out of `kwargs` (a fit's arguments): the rest are
    `model.fit`'s.

    Example:
        >>> kwargs = {"epochs": 2, "window": 10}
        >>> measurement_options(kwargs), kwargs
        ({'window': 10}, {'epochs': 2})
    """
    return {name: kwargs.pop(name) for name in OPTIONS if name in kwargs}


class ProfileCallback(keras.callbacks.Callback):
    """Measures a Keras fit; `callback.report` holds the `RunReport` once it ends.

    Args:
        plan: the plan in force (default: the last `auto_configure()` plan).
        allow_float_ids: True (the default): token ids rounded by a 16-bit float are a
            critical verdict in the report; False: the fit stops with
            `accelkit.keras.checks.UnsafeMixedPrecision` at the first batch that shows them
            (`accelkit.keras.fit` passes False unless told otherwise).
        options: the measurement options of every door (`accelkit.profiling.options`):
            ``flops_per_step`` (counted otherwise: the first batch, then each new shape),
            ``tokens_per_sample`` (found for integer (B, T) inputs), ``warmup=3``,
            ``window=50``, ``sample_gpu=True``, ``calibrate=False``, ``single_device``
            (``single_device_samples_per_second=`` is its former name).

    Raises:
        ValueError, TypeError: an option out of range, of the wrong type or unknown,
            when the callback is built.

    Training is what the fit's training steps take. Validation inside the fit
    (``validation_data``, ``validation_split``: from the epoch's last step, where Keras
    sets it up, to its ``on_test_end``) is evaluation, with each validation's loss in
    `report.eval_losses`; each epoch's boundary (from its end to the next epoch's first
    batch: the callbacks, checkpoints, the new iterator) is the rest. Both are reported
    beside the training figures (`report.evaluation_seconds`, `report.other_seconds`,
    `report.evaluation_share`) and count in none of them (step time, samples/s, MFU,
    input wait).

    Under ``mixed_float16``, a `train_step` of the model's own that applies gradients
    without ``self.optimizer.scale_loss(loss)`` would train on gradients divided by the
    loss scale: the callback finds it while Keras traces the step and has them applied
    as computed, with a warning and the ``unscaled_train_step`` verdict
    (`accelkit.frameworks.keras_train_step`).

    At each epoch's end the callback adds the epoch's figures to Keras' ``logs``
    (``accelkit_samples_per_second``, ``accelkit_step_time_s``, ``accelkit_mfu``,
    ``accelkit_input_wait_share``... as `accelkit.profiling.metrics` spells them), so
    `History`, `CSVLogger` and `TensorBoard` record them. Keras calls callbacks in list
    order with one ``logs`` dict: put this callback before `CSVLogger` and `TensorBoard`
    (`accelkit.keras.fit` puts it first). Each series holds one window an epoch, the last
    epoch's included (its window closes at its end), never the whole run's figure. Those
    are `callback.report`'s (`report.history` under `accelkit.keras.fit`): Keras' loggers
    keep one row an epoch and no run summary (`CSVLogger` fixes its columns at the first
    epoch's end; `TensorBoard` writes at epoch and batch ends only).

    Under a distribution strategy the figures are this process's: its replicas'
    samples (MirroredStrategy: all of them). Under MultiWorkerMirroredStrategy each
    worker measures itself, and at the end of the fit the workers exchange their
    figures (one small all-gather), so every worker's report has `world_size`,
    `ranks`, `slowest_rank` and `global_samples_per_second` for the whole cluster.

    Attributes:
        options: the validated `MeterOptions`.
        recorder: the fit's `accelkit.profiling.recorder.Recorder` (from the fit's start).
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
        ...                     validation_data=(np.zeros((64, 4)), np.zeros((64, 2))),
        ...                     callbacks=[callback])
        >>> callback.report.steps, callback.report.evaluation_seconds > 0
        (16, True)
        >>> len(history.history["accelkit_samples_per_second"])   # one figure an epoch
        2
        >>> print(callback.report)  # doctest: +SKIP
        accelkit run: tensorflow, sequential on cpu, precision fp32 (matmuls fp32), 16 steps ...
    """

    def __init__(
        self,
        plan: Plan | None = None,
        *,
        allow_float_ids: bool = True,
        single_device_samples_per_second: float | RunReport | str | None = None,
        **options: Any,
    ) -> None:
        super().__init__()
        single = arguments.renamed(
            options.pop("single_device", None), single_device_samples_per_second, SINGLE_DEVICE
        )
        self.options = MeterOptions.of({**options, "single_device": single}, plan=plan)
        self.plan = plan
        self.allow_float_ids = allow_float_ids
        self.report: RunReport | None = None
        self.interrupted = False
        self.facts: dict[str, Any] = {}
        self.recorder: Recorder | None = None
        self._fitting = False

    # -- Keras hooks -----------------------------------------------------------------

    def on_train_begin(self, logs: Any = None) -> None:
        self.plan = self._plan = (  # _plan: the same, never None while fitting
            self.plan
            or current_plan("tensorflow")
            or make_plan(detect(), Request(framework="tensorflow"))
        )
        self._tf = _tensorflow()
        self._gpus = (
            self._tf.config.list_physical_devices("GPU")
            if self._tf is not None
            else list(self._plan.hardware.gpus)
        )
        self.recorder = recorder = Recorder(
            self.options,
            plan=self._plan,
            sync=self._sync,
            gpus=[g.index for g in self._plan.hardware.gpus[: len(self._gpus)]],
        )
        # Token ids through a 16-bit float, 16-bit outputs: critical verdicts in the report.
        recorder.facts.update(checks.mixed_precision_facts(self.model))
        if (step := loss_scaling.train_step_facts(self.model)) is not None:
            recorder.facts["custom_train_step"] = step
        recorder.facts.update(self.facts)  # the caller's, given before the fit
        self.facts = recorder.facts
        self._count_first = self.options.flops_per_step is None
        self._epochs = 0
        self._first_batch_size: int | None = None
        self._scales: list[list[float]] = []
        self._read_scale(0, initial=True)
        self.report = None
        if self._gpus and self._tf is not None:
            self._tf.config.experimental.reset_memory_stats("GPU:0")
        self._guard_loss_scaling()
        self._wrap_train_function()
        self._fitting = True
        recorder.start()

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self._steps.epoch_begin((self.params or {}).get("steps"))

    def on_test_begin(self, logs: Any = None) -> None:
        # The fit's validation; a model.evaluate outside the fit measures nothing here.
        if self._fitting:
            # Since the last step Keras has been setting up the validation (its iterator,
            # its test function): evaluation too.
            self._recorder.attribute(EVALUATION)
            self._recorder.pause(EVALUATION)

    def on_test_end(self, logs: Any = None) -> None:
        if self._fitting:
            self._recorder.resume()
            if logs and "loss" in logs:
                self._recorder.eval_losses.append(float(logs["loss"]))

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        recorder = self._recorder
        # From here to the next epoch's first batch is the rest (the counting train
        # function resumes): the other callbacks, checkpoints, the next iterator.
        recorder.pause(OTHER)
        self._epochs += 1  # epochs trained, whatever initial_epoch was
        if logs and "loss" in logs:
            recorder.losses.append(float(logs["loss"]))
        self._read_scale(recorder.clock.steps)
        if recorder.peak is None:
            self._set_peak()
        # Keras has waited for the device to read the epoch's logs: closing the open
        # window here costs nothing, so every epoch has its figures whatever the window.
        figures = recorder.take_figures(close=True)
        if logs is not None:  # for the callbacks after this one: CSVLogger, History...
            logs.update(metrics.spelled(figures, "keras"))

    def on_train_end(self, logs: Any = None) -> None:
        self.finish()

    def finish(self) -> RunReport:
        """Stop the sampler and build the report (idempotent)."""
        if self.report is None:
            self._fitting = False
            self._recorder.stop()
            self._restore_train_function()
            self._unguard()
            self.report = self._build()
        return self.report

    def stop_sampler(self) -> None:
        """For a fit that raised: stop measuring, build nothing (a fit that raised before
        it began has nothing to stop)."""
        self._fitting = False
        if self.recorder is not None:
            self.recorder.stop()
        self._restore_train_function()
        self._unguard()

    @property
    def _recorder(self) -> Recorder:
        """The recorder, once the fit has begun (`on_train_begin` makes it)."""
        if self.recorder is None:
            raise RuntimeError("ProfileCallback: the fit has not begun (no on_train_begin)")
        return self.recorder

    def _set_peak(self) -> None:
        """The dense peak of the devices used, for the epochs' MFU (the report's own)."""
        from accelkit.hardware.capabilities import matmul_dtype

        precision = head.precision_ran(self.model, self._plan) or self._plan.precision
        self._recorder.set_peak(
            self._hardware(),
            matmul_dtype(precision, self._tf32_enabled()),
            devices=self._replicas(),
        )

    def _read_scale(self, step: int, initial: bool = False) -> None:
        """The loss scale of a LossScaleOptimizer (mixed_float16), once per epoch."""
        scale = loss_scale(getattr(self.model, "optimizer", None), initial=initial)
        if scale is not None:
            self._scales.append([step, scale])

    # -- the train function ------------------------------------------------------------

    def _guard_loss_scaling(self) -> None:
        """A custom train_step that does not scale its loss under a LossScaleOptimizer:
        its gradients applied as computed, not divided by the scale (`keras_train_step`).
        A model guarded at compile (the policy accelkit set) keeps that guard."""
        self._guard, self._own_guard = None, False
        if self._tf is None:
            return  # the JAX and PyTorch trainers apply gradients elsewhere
        guard = loss_scaling.guard_of(self.model)
        if guard is not None:
            guard.found = self._unscaled_step
            if guard.unscaled:  # traced in an earlier fit: it will not be found again
                self._unscaled_step()
            self._guard = guard
            return
        guard = loss_scaling.UnscaledStepGuard(self.model, found=self._unscaled_step)
        if guard.install():
            self._guard, self._own_guard = guard, True

    def _unscaled_step(self) -> None:
        step = self.facts.setdefault("custom_train_step", {})
        step.update(scales_loss=False, compensated=True)
        loss_scaling.warn_unscaled(self.model)

    def _unguard(self) -> None:
        guard = getattr(self, "_guard", None)
        if guard is not None:
            if self._own_guard:
                guard.restore()
            step = self.facts.get("custom_train_step")
            if step and not guard.unscaled:  # what the traced step did, whatever its source says
                # None: it never applied self.optimizer (a GAN's own optimizers divide nothing)
                step["scales_loss"] = True if guard.scaled else None

    # No per-batch hook: Keras (JAX) then keeps its async dispatch instead of waiting for
    # each step's logs. Steps are counted where Keras calls its train function
    # (`accelkit.keras.train_function`), every batch of a multi-step call included.

    def _wrap_train_function(self) -> None:
        notes = self._recorder.notes
        if self._count_first and self._tf is None:
            notes["flops_per_step"] = (
                f"counted on the TensorFlow backend only (Keras runs on "
                f"{keras.config.backend()}): pass flops_per_step="
            )
            self._count_first = False
        elif self._count_first and getattr(self.model, "run_eagerly", False):
            notes["flops_per_step"] = "not counted with run_eagerly=True: pass flops_per_step="
            self._count_first = False
        self._shapes = (
            ShapeFlops(self._count_batch, self._recorder.clock, batches=batches.KERAS)
            if self._count_first
            else None
        )
        self._steps = StepCounter(
            self.model,
            self._recorder.clock,
            self._tf,
            tokens_per_sample=self.options.tokens_per_sample,
            first_batch=self._first_batch,
            notes=notes,
            step_flops=self._step_flops if self._shapes is not None else None,
        )
        self._steps.wrap()

    def _first_batch(self, data: Any, samples: int | None) -> None:
        """Once per fit: its batch size, the 16-bit checks, the FLOP count."""
        self._first_batch_size = samples
        first = batches.first_replica(data)
        # Integers past float16's exact range fed to a float input: a fact, or an error.
        x, _, _ = keras.utils.unpack_x_y_sample_weight(first)
        if found := checks.check_first_batch(x, self.model, allow_float_ids=self.allow_float_ids):
            self.facts["ids_over_float16"] = found
        if not self.facts.get("float16_outputs") and (
            halves := checks.call_float16_outputs(x, self.model)
        ):
            self.facts.update(float16_outputs=halves, float16_outputs_in_call=True)
            _log.warning(
                "accelkit: %s's outputs are %s under %s: an activation inside its call() "
                "(sigmoid, softmax) is computed in 16 bits. %s",
                self.model.name,
                self.model.compute_dtype,
                keras.mixed_precision.global_policy().name,
                checks.IN_CALL_FIX,
            )
        if self._count_first:
            self._count_first = False
            count = self._count_batch(first)
            self._recorder.set_flops(count)
            if self._shapes is not None:
                self._shapes.start([first], count)

    def _step_flops(self, data: Any) -> StepFlops | None:
        """A steady step's FLOPs from its batch's shapes (`ShapeFlops`)."""
        assert self._shapes is not None
        return self._shapes.step([batches.first_replica(data)])

    def _restore_train_function(self) -> None:
        steps = getattr(self, "_steps", None)
        if steps is not None:
            steps.restore()

    def _count_batch(self, batch: Any) -> FlopCount:
        """One training step's FLOPs on `batch`, one replica's, times the replicas."""
        from accelkit.profiling.flops_tensorflow import count_train_step_flops

        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(batch)
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

    # -- report ------------------------------------------------------------------------

    def _build(self) -> RunReport:
        self._note_shapes()
        measured = self._measurements()
        report = build_report(measured)
        notes = measured.notes
        if "input_wait_share" in notes:  # the clock saw no wait where none was timed
            report.input_wait_share = None
        if not self._gpus:
            report.note("peak_memory_bytes", "CPU run: device memory is not tracked")
        elif self._tf is None:
            report.note("peak_memory_bytes", "read on the TensorFlow backend only")
        strategy = getattr(self.model, "distribute_strategy", None)
        if self._tf is not None and strategies.is_multi_worker(strategy):
            ranks = strategies.gather_world(
                report,
                strategy,
                measured.clock.steady_samples,
                measured.devices,
                interrupted=self.interrupted,
            )
            if ranks is not None:
                world.aggregate(report, ranks, self.options.single_device)
                with_advice(report, measured.hardware, measured.plan)
        return report

    def _note_shapes(self) -> None:
        """How the steps' FLOPs followed their batches' shapes (`ShapeFlops.note`), or
        why they could not: steps whose batches stayed inside Keras' compiled loop."""
        shapes, steps = self._shapes, self._steps
        if shapes is None:
            return
        if steps.unseen_steps:
            self._recorder.note(
                "flops_per_step",
                f"the first batch's count stands for every step: {steps.unseen_steps} steps "
                f"ran inside Keras' compiled loop (steps_per_execution="
                f"{steps_per_execution(self.model)} on a tf.data input), where their "
                "batches' shapes cannot be read",
            )
        elif (how := shapes.note()) is not None:
            self._recorder.note("flops_per_step", how)

    def _measurements(self) -> Measurements:
        """What the recorder measured, with what only Keras can say."""
        plan, replicas = self._plan, self._replicas()
        try:
            facts = self._facts(replicas)
        except Exception as error:  # noqa: BLE001 - facts feed advice, never fail a run
            facts = {"facts_error": f"{type(error).__name__}: {error}"}
        names = [gpu.name for gpu in plan.hardware.gpus]
        measured = self._recorder.measurements(
            framework="tensorflow",
            model=self.model.name,
            device=device_label(replicas, len(self._gpus), names[0] if names else None),
            hardware=self._hardware(),
            precision=head.precision_ran(self.model, plan),
            tf32_enabled=self._tf32_enabled(),
            devices=replicas,
            peak_memory_bytes=(
                int(self._tf.config.experimental.get_memory_info("GPU:0")["peak"])
                if self._gpus and self._tf is not None
                else None
            ),
            epochs=self._epochs,
            interrupted=self.interrupted,
            facts=facts,
        )
        if self.options.calibrate:  # after the clock's end: not the run's time
            measured.calibration = self._calibrate(measured.notes)
        return measured

    def _hardware(self) -> Any:
        """The devices the figures are against: the plan's GPUs, or this host's CPU."""
        plan = self._plan
        return plan.hardware if self._gpus else environment.cpu_host(plan.hardware.launcher)

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
        if not all(math.isfinite(loss) for loss in self._recorder.losses):
            facts["weights_finite"] = weights_finite(self.model)
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

    def _calibrate(self, notes: dict[str, str]) -> Any:
        if self._tf is None:
            notes["calibrated_tflops"] = "calibrated on the TensorFlow backend only"
            return None
        from accelkit.profiling import calibrate

        measure = calibrate.matmul_tflops_tensorflow
        return calibrate.for_run(measure, self._plan.precision, self._tf32_enabled(), notes)


def _tensorflow() -> Any:
    """TensorFlow when Keras runs on it, else None (imported only then)."""
    if keras.config.backend() != "tensorflow":
        return None
    import tensorflow

    return tensorflow
