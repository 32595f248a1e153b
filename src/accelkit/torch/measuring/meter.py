"""`Meter`: the profiled-fit measurements for a hand-written PyTorch loop: each step
inside ``with meter.step(batch):``, the report from ``meter.report()`` (`Meter`'s
example). Per step it reads the host clock twice and adds a few numbers; the device is
synchronised only every `window` steps (see `accelkit.profiling.clock`). The meter is
PyTorch's adapter of the one measurement core (`accelkit.profiling.recorder.Recorder`):
the Lightning and Hugging Face callbacks and `accelkit.torch.fit` measure through it.

Evaluation inside the loop goes in ``with meter.phase("evaluation"):`` (anything else
that is not training, such as a checkpoint: ``"other"``): its time is reported beside
the training figures (`RunReport.evaluation_seconds`) and counts in none of them.

In a process group of several ranks (torchrun), building the report gathers
every rank's figures in one ``all_gather_object``: every rank must close the
meter (leaving the ``with meter:`` block does), then each holds the report of
the whole run (`world_size`, `global_samples_per_second`, `ranks`...).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from accelkit.configure import current_plan
from accelkit.frameworks.torch_precision import scaler_enabled
from accelkit.hardware import detect, environment
from accelkit.hardware.capabilities import TorchTF32, matmul_dtype
from accelkit.hardware.info import HardwareInfo
from accelkit.planning import Request
from accelkit.planning import plan as make_plan
from accelkit.profiling import calibrate, torch_batches
from accelkit.profiling.clock import StepClock
from accelkit.profiling.flop_count import FlopCount, StepFlops
from accelkit.profiling.flops_shapes import ShapeFlops
from accelkit.profiling.flops_torch import counted
from accelkit.profiling.options import MeterOptions
from accelkit.profiling.recorder import Recorder
from accelkit.profiling.run_report import RunReport
from accelkit.report.assemble import build_report
from accelkit.torch.distributed import sharding
from accelkit.torch.distributed.communication import GradientTimer, steady_totals
from accelkit.torch.measuring.facts import half_integer_inputs, model_device
from accelkit.torch.measuring.memory_probe import ActivationProbe, TrialsPeak, memory_facts
from accelkit.torch.measuring.meter_guard import StepGuard
from accelkit.utils.imports import require

if TYPE_CHECKING:
    from types import TracebackType

    from typing_extensions import Self


class Meter:
    """Measures a PyTorch training loop and builds its `RunReport`.

    Args:
        model: the model being trained (for its device, name and FLOP count).
        optimizer: the optimizer, for the advisor's memory figures (its state size).
        grad_scaler: the `torch.amp.GradScaler` in use; its scale is read at window
            boundaries (when the device is synchronised anyway) for the advisor.
        count_flops: count the first step's FLOPs with
            `torch.utils.flop_counter.FlopCounterMode` (unless ``flops_per_step`` is
            given); False when the caller counts them (`set_flops`) or they are not wanted.
            A step whose batch has other shapes than the first's gets its own count
            (`accelkit.profiling.flops_shapes`), by `count_batch`.
        count_batch: counts one training step's FLOPs on a batch of the loop (one of a
            few samples); None: `model`'s forward and backward on it, the batch taken
            as `step` documents (a dict as keywords, a tuple's first item, a tensor),
            the loss the model returns or the sum of its outputs. Checked once against
            the first step's count, which holds what the step really did.
        gather: gather every rank's figures into the report when it is built (a
            collective: every rank must build it). None: when a process group of
            more than one rank is initialised.
        epochs: recorded in the report.
        **options: what to measure and how, the same in every door
            (`accelkit.profiling.options.MeterOptions`): ``plan``, ``flops_per_step``,
            ``tokens_per_sample`` (a dict batch's ``input_ids`` and ``attention_mask``
            are found by themselves), ``warmup`` (at least 1 when counting FLOPs: the
            counted step runs slower), ``window``, ``sample_gpu``, ``calibrate``,
            ``single_device``.

    Attributes:
        facts: what the advisor reads besides the figures (layer sizes, loader
            settings, loss scale...; see `accelkit.advisor.context`). Add your own,
            e.g. ``meter.facts.update(accelkit.torch.measuring.facts.loader_facts(loader))``.
        on_window: called as ``on_window(step_seconds, step)`` at each steady-state
            window boundary.

    Example:
        >>> import torch
        >>> model = torch.nn.Linear(16, 4)
        >>> optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        >>> loader = [(torch.randn(32, 16), torch.randint(0, 4, (32,)))] * 8
        >>> meter = Meter(model, warmup=1, window=4)
        >>> with meter:
        ...     for x, y in loader:
        ...         with meter.step((x, y)):
        ...             torch.nn.functional.cross_entropy(model(x), y).backward()
        ...             optimizer.step()
        ...             optimizer.zero_grad()
        ...     with meter.phase("evaluation"), torch.no_grad():
        ...         _ = [model(x) for x, _ in loader[:2]]
        >>> report = meter.report()
        >>> report.steps, report.evaluation_seconds > 0
        (8, True)
    """

    def __init__(
        self,
        model: Any = None,
        *,
        optimizer: Any = None,
        grad_scaler: Any = None,
        count_flops: bool = True,
        gather: bool | None = None,
        epochs: int | None = None,
        count_batch: Callable[[Any], FlopCount] | None = None,
        **options: Any,
    ) -> None:
        self._torch = require("torch")
        self.options = MeterOptions.of(options)
        self.gather = gather
        self.model = model
        self.plan = (
            self.options.plan
            or current_plan("torch")
            or make_plan(detect(), Request(framework="torch"))
        )
        self.epochs = epochs
        self.interrupted = False
        self._count_first = count_flops and self.options.flops_per_step is None
        self.last_batch_size: int | None = None
        self._device = model_device(self._torch, model)
        self._cuda = self._device.type == "cuda"
        gpus, index = self.plan.hardware.gpus, self._device.index or 0  # CUDA's order
        self.recorder = Recorder(
            self.options,
            plan=self.plan,
            sync=(lambda: self._torch.cuda.synchronize(self._device)) if self._cuda else None,
            gpus=[gpus[index].index] if self._cuda and index < len(gpus) else [],
            warmup=max(self.options.warmup, 1 if self._count_first else 0),
        )
        self.recorder.on_window(self._window_end)
        self.on_window: Callable[[float, int], None] | None = None
        self.facts = self.recorder.facts
        self.losses = self.recorder.losses
        self.optimizer = optimizer
        self._scaler = (
            grad_scaler if grad_scaler is not None and scaler_enabled(grad_scaler) else None
        )
        self._scales: list[list[float]] = []
        self._first_batch_size: int | None = None
        self._batch_facts: dict[str, Any] = {}  # what the meter saw in the batches
        self._started = False
        self._guard = StepGuard()
        self._report: RunReport | None = None
        # What accelkit.torch.fit's tuner measured (TuneResult.to_dict()), for the report.
        self.tuning: dict[str, Any] | None = None
        self._warmup_after_trials: int | None = None
        self._activations = ActivationProbe(self._torch, self._device, model)
        self._trials_peak = TrialsPeak(self._torch, self._device)
        self._shapes = self._shape_flops(count_batch)
        self.communication: GradientTimer | None = None  # communication.timed sets it

    @property
    def clock(self) -> StepClock:
        """The recorder's clock: where a door that owns its loop reports steps."""
        return self.recorder.clock

    @property
    def tokens_per_sample(self) -> int | None:
        return self.options.tokens_per_sample

    @property
    def flops_per_step(self) -> float | None:
        """FLOPs of one step: the user's figure, else the counted one, else None."""
        return self.recorder.flops_per_step

    # -- lifecycle -------------------------------------------------------------------

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if kind is None or kind is KeyboardInterrupt:
            self.interrupted = self.interrupted or kind is KeyboardInterrupt
            self.close()
        else:  # the user's error propagates unchanged; only the sampler must stop
            self.recorder.stop()

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        if self._cuda:
            self._torch.cuda.reset_peak_memory_stats(self._device)
            tf32 = TorchTF32(self._torch).enabled()
            dtype = matmul_dtype(self.plan.precision, tf32)
            self.recorder.set_peak(self.plan.hardware, dtype, gpu=self._device.index or 0)
        if self._scaler is not None:
            self._read_scale(self._scaler, 0)
        self.recorder.start()

    def close(self) -> RunReport:
        """Stop the sampler and build the report (idempotent)."""
        if self._report is None:
            self.recorder.stop()
            self._report = self._build()
        return self._report

    def report(self) -> RunReport:
        return self.close()

    # -- per step --------------------------------------------------------------------

    @contextlib.contextmanager
    def step(self, batch: Any = None, *, samples: int | None = None) -> Iterator[None]:
        """Measure one training step; `batch` gives the sample (and token) count.

        Args:
            batch: the step's batch as the model library has it: a tensor, a tuple or
                list ``(inputs, targets)``, or a dict such as a transformers batch
                (``input_ids``, ``attention_mask``, ``labels``); samples are the first
                dimension of its token ids or of its first tensor.
            samples: the sample count, when the batch does not tell it.

        A step inside another step, or after `report`, runs unmeasured (the outermost
        counts each step once; the report is built): a warning and a note say so.

        Example:
            >>> import torch
            >>> ids = torch.randint(0, 100, (8, 64))
            >>> batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}
            >>> meter = Meter(warmup=1, window=1)
            >>> with meter:
            ...     for _ in range(3):
            ...         with meter.step(batch):
            ...             pass   # model(**batch).loss.backward(), optimizer.step(), ...
            >>> meter.report().batch_size     # samples: the first dimension of input_ids
            8.0
        """
        if not self._guard.enter(self._report):
            try:
                yield
            finally:
                self._guard.leave()
            return
        try:
            self.step_begin()
            counter = self._flop_counter() if self._count_first else None
            if counter is None:
                yield
            else:
                self._count_first = False
                with counter:
                    yield
                count = counted(counter, method="torch FlopCounterMode on the first step")
                self.set_flops(count, batches=None if batch is None else [batch])
            self.step_counted(batch, samples)
        finally:
            self._activations.abandon()  # a step that raised: its hooks go, nothing measured
            self._guard.leave()

    def step_begin(self) -> None:
        """Open a step (for doors whose framework opens and closes a step in two hooks,
        with `step_counted`): the clock's start, and on the first step the activations'
        measurement (`memory_probe.ActivationProbe`)."""
        self.start()
        self._trials_peak.step_begin()
        self._activations.begin()
        self.clock.step_begin()

    def step_counted(self, batch: Any, samples: int | None = None) -> None:
        """Close a step begun with `step_begin`: its samples and tokens from `batch` (or
        `samples`), the first batch's checks."""
        found, ids = torch_batches.sizes(batch)
        count = samples if samples is not None else found
        self.last_batch_size = count
        if self._first_batch_size is None:
            self._first_batch_size = count
            # Token ids cast to a 16-bit float past what it holds exactly: a critical verdict.
            if found_half := half_integer_inputs(batch):
                self._batch_facts["half_integer_inputs"] = found_half
        tokens, real = self._tokens(batch, count, ids)
        flops = self.step_flops([batch])
        self.step_done(samples=count or 0, tokens=tokens, real_tokens=real, flops=flops)

    def step_done(
        self, *, samples: int, tokens: int, real_tokens: Any = None, flops: StepFlops | None = None
    ) -> None:
        """Close a step begun with `step_begin`, counted by the door itself (`flops`: the
        step's own, `step_flops`)."""
        self.step_work_done()
        self.clock.step_done(samples=samples, tokens=tokens, real_tokens=real_tokens, flops=flops)

    def step_flops(self, batches: list[Any]) -> StepFlops | None:
        """The FLOPs of a steady step that trained `batches` (its micro-batches), from
        their shapes (`accelkit.profiling.flops_shapes`): a new shape is counted apart
        from the step's time. None in warm-up, without a first count, or where the
        shapes cannot be read (the run's one count stands for the step)."""
        if self._shapes is None or not self.clock.steady:
            return None
        return self._shapes.step(batches)

    def _shape_flops(self, count_batch: Callable[[Any], FlopCount] | None) -> ShapeFlops | None:
        """Counts by shape, unless the user gave the FLOPs, there is no model to count,
        or a count on one rank would wait for the others (sharded parameters)."""
        model = self.model
        if self.options.flops_per_step is not None or not isinstance(model, self._torch.nn.Module):
            return None
        if sharding.gathers_in_forward(model):
            return None
        return ShapeFlops(count_batch or functools.partial(_model_pass, model), self.clock)

    def step_work_done(self) -> None:
        """The step's own forward, backward and optimizer step are over: what a door runs
        before `step_done` (the FLOP count's pass) is not the step's memory."""
        self._activations.end()

    def _flop_counter(self) -> Any:
        try:
            from accelkit.profiling.flops_torch import flop_counter

            return flop_counter()
        except Exception as error:  # noqa: BLE001 - counting is optional
            self.note("flops_per_step", f"FLOP counting unavailable: {error}")
            return None

    def _tokens(self, batch: Any, samples: int | None, ids: Any) -> tuple[int, Any]:
        """(token positions, real tokens) of one batch; real is None without a mask.

        The real count is ``mask.sum()`` left on the mask's device: one small reduction
        queued with the step's kernels and summed there by the clock, which reads it once
        at the end of the run; an ``int()`` here would wait for the device every step.
        """
        if not samples:
            return 0, None
        tokens = (
            samples * self.tokens_per_sample
            if self.tokens_per_sample is not None
            else int(ids.numel())
            if ids is not None
            else 0
        )
        mask = torch_batches.attention_mask(batch, ids) if tokens else None
        return tokens, None if mask is None else mask.sum()

    # -- phases and figures ----------------------------------------------------------

    def phase(self, name: str) -> contextlib.AbstractContextManager[None]:
        """``with meter.phase("evaluation"):`` (or ``"other"``): that block is not
        training; its time is reported beside the training figures."""
        return self.recorder.phase(name)

    def take_figures(self, *, close: bool = False) -> dict[str, float]:
        """The figures of the windows since the last call (`Recorder.take_figures`)."""
        return self.recorder.take_figures(close=close)

    def set_flops(
        self,
        count: FlopCount,
        *,
        batches: list[Any] | None = None,
        count_batch: Callable[[Any], FlopCount] | None = None,
    ) -> None:
        """Use `count` (e.g. from `count_train_step_flops`) instead of counting inline;
        with the `batches` it was counted on (a step's micro-batches), later steps of
        other shapes get their own counts (`step_flops`), by `count_batch` where given
        (the way `count` was taken), else the meter's."""
        self.recorder.set_flops(count)
        self._count_first = False
        if count_batch is not None:
            self._shapes = self._shape_flops(count_batch)
        if self._shapes is not None and batches:
            self._shapes.start(batches, count)

    def count_again(
        self, batches: list[Any], count_batch: Callable[[Any], FlopCount] | None = None
    ) -> None:
        """Count a step of `batches` (its micro-batches) again, in place of the first
        step's count: the step tune kept runs some matmuls in another dtype (float8), so
        the first count no longer says which ran in float8 (the fit does the same,
        `accelkit.torch.training.loop`). One uncompiled forward and backward pass per
        batch, the model's state put back: `count_batch(batch)` where the door has its
        own step to count (a LightningModule's ``training_step``), else the model's
        forward on the batch. The doors that count as the trainer trains call it on the
        first step after the trials, a warm-up step. FLOPs the user gave, or a count that
        fails, leave the count as it was.
        """
        if not batches or self.options.flops_per_step is not None:
            return
        if count_batch is None:
            if not isinstance(self.model, self._torch.nn.Module):
                return
            count_batch = functools.partial(_model_pass, self.model, sliced=None)
        try:
            count = functools.reduce(lambda a, b: a + b, map(count_batch, batches))
        except Exception as error:  # noqa: BLE001 - a figure, never the run's failure
            self.note(
                "float8_share",
                f"the step tune kept was not counted again ({type(error).__name__}: "
                f"{error}): the first step's count, without float8, stands",
            )
            return
        if count.total:
            self.set_flops(count, batches=batches)

    def hold_warmup(self) -> None:
        """Keep the warm-up open until `warmup` steps after the next one (at least one):
        called before each `tune` trial step, so that the steady-state figures are those
        of the step the run keeps, not of the candidates tried."""
        self._trials_peak.trial_step()
        clock = self.clock
        if self._warmup_after_trials is None:  # the warm-up asked for, kept after the trials
            self._warmup_after_trials = max(clock.warmup, 1)
        clock.warmup = max(clock.warmup, clock.steps + 1 + self._warmup_after_trials)

    def record_loss(self, value: float) -> None:
        self.losses.append(float(value))

    def note(self, field: str, reason: str) -> None:
        """Say in the report why `field` is missing or how it was obtained."""
        self.recorder.note(field, reason)

    def _window_end(self, step_s: float, step: int) -> None:
        """At a synchronised window boundary: read what would cost a sync elsewhere."""
        if self._scaler is not None:
            self._read_scale(self._scaler, step)
        if self.on_window is not None:
            self.on_window(step_s, step)

    def _read_scale(self, scaler: Any, step: int) -> None:
        try:
            self._scales.append([step, float(scaler.get_scale())])
        except Exception:  # noqa: BLE001 - a fact for the advisor, never a failure
            self._scaler = None

    # -- devices ---------------------------------------------------------------------

    @property
    def device_label(self) -> str:
        if not self._cuda:
            return "cpu"
        return f"{self._device} {self._torch.cuda.get_device_name(self._device)}"

    # -- report ----------------------------------------------------------------------

    def _build(self) -> RunReport:
        self.recorder.finish()  # its last window reads the loss scale: before the facts
        hardware: HardwareInfo = (
            self.plan.hardware if self._cuda else environment.cpu_host(self.plan.hardware.launcher)
        )
        tf32 = self._cuda and TorchTF32(self._torch).enabled()
        calibration = None
        if self.options.calibrate:
            measure = functools.partial(calibrate.matmul_tflops, device=str(self._device))
            calibration = calibrate.for_run(measure, self.plan.precision, tf32, self.recorder.notes)
        peak = self._peak_memory()  # before the facts: it may add one
        try:
            facts = self._facts()
        except Exception as error:  # noqa: BLE001 - facts feed advice, never fail a run
            facts = {"facts_error": f"{type(error).__name__}: {error}"}
        if self._shapes is not None and (how := self._shapes.note()):
            self.note("flops_per_step", how)
        measurements = self.recorder.measurements(
            framework="torch",
            model=type(self.model).__name__ if self.model is not None else "-",
            device=self.device_label,
            hardware=hardware,
            tf32_enabled=tf32,
            gpu=self._device.index or 0 if self._cuda else 0,
            peak_memory_bytes=peak,
            calibration=calibration,
            epochs=self.epochs,
            interrupted=self.interrupted,
            notes=self._guard.notes(),
            facts=facts,
            tuning=self.tuning,
        )
        measurements.communication = steady_totals(
            self.communication, measurements.clock.warmup_steps, measurements.notes
        )
        report = build_report(measurements)
        if not self._cuda:
            report.note("peak_memory_bytes", "CPU run: device memory is not tracked")
        if self.gather is not False:
            from accelkit.torch.distributed import parallel

            parallel.gather_run(
                report,
                measurements.clock.steady_samples,
                device=self._device,
                single_device=self.options.single_device,
                hardware=hardware,
                plan=self.plan,
            )
        return report

    def _peak_memory(self) -> int | None:
        """The allocator's peak over the training steps: since the first step began (its
        measurement resets the counter; else since `start`), or since the first step after
        tune's trials where they ran (`TrialsPeak`: the kept step's peak). A higher peak
        before it (the FLOP count's pass under activation checkpointing: benchmarks/
        flop_count_memory.py; a candidate's own memory during the trials) is kept as a
        fact and said in a note."""
        if not self._cuda:
            return None
        peak = int(self._torch.cuda.max_memory_allocated(self._device))
        before = self._activations.prior_peak
        if before > peak:
            self.facts["pre_training_peak_memory_bytes"] = before
            self.note(
                "peak_memory_bytes",
                f"the training steps' peak; before the first step (the FLOP count's pass, "
                f"a trainer's checks) the device held up to {before / 1e9:.2f} GB",
            )
        trials = self._trials_peak.bytes
        if trials is not None and trials > peak:
            self.facts["trials_peak_memory_bytes"] = trials
            self.note(
                "peak_memory_bytes",
                f"the kept step's peak, after tune's trials; during them the device held up "
                f"to {trials / 1e9:.2f} GB (a candidate's own memory, such as CUDA graphs' "
                f"pool)",
            )
        return peak

    def _facts(self) -> dict[str, Any]:
        from accelkit.torch.measuring.facts import model_facts

        facts: dict[str, Any] = {}
        if self.model is not None:
            facts.update(model_facts(self.model, self.optimizer))
        facts["visible_gpus"] = (
            self._torch.cuda.device_count() if self._torch.cuda.is_available() else 0
        )
        if self._first_batch_size:
            facts["batch_size"] = self._first_batch_size
        if self._scales:
            facts["loss_scale"] = {"initial": self._scales[0][1], "history": self._scales[1:]}
        facts.update(self._batch_facts)
        facts.update(self.facts)  # the caller's facts win, but for measured memory:
        facts.update(self._memory_facts(facts.get("predicted_memory_bytes")))
        return facts

    def _memory_facts(self, planned: int | None) -> dict[str, Any]:
        """The memory model's figures for this model, its activations measured on the
        first step (`memory_probe.memory_facts`); they replace a plan's estimate made
        before the model existed, kept as ``planned_memory_bytes``."""
        if self._cuda and self._activations.why is not None:
            self.note("activation_bytes", f"not measured: {self._activations.why}")
        try:
            measured = memory_facts(self._activations, self.model, self.optimizer, self.plan)
        except Exception as error:  # noqa: BLE001 - an estimate for the advisor, never a failure
            return {"memory_estimate": f"not estimated: {type(error).__name__}: {error}"}
        if planned is not None and "predicted_memory_bytes" in measured:
            measured["planned_memory_bytes"] = planned
        return measured


def _model_pass(model: Any, batch: Any, sliced: bool | None = False) -> FlopCount:
    """One training step's FLOPs of `model` on a `Meter.step` batch: a dict as keywords,
    a tuple's or list's first item, a tensor as it is; the loss the model returns, else
    the sum of its outputs (their FLOPs are not counted either way). `sliced`: as
    `count_train_step_flops` takes it (None: on a GPU, slices of a few samples, so that
    a whole batch counted outside the trainer's autocast holds little memory)."""
    from accelkit.profiling.flops_torch import count_train_step_flops

    plain = isinstance(batch, Mapping) or torch_batches.is_tensor(batch)
    inputs = batch if plain or not isinstance(batch, (list, tuple)) else batch[0]
    return count_train_step_flops(model, inputs, sliced=sliced)
