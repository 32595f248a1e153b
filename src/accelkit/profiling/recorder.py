"""`Recorder`: the one measurement core behind every door (`accelkit.torch.Meter`, both
fits, `accelkit.keras.ProfileCallback`, the Lightning and Hugging Face callbacks).

A door adapts its framework's hooks to four calls, and nothing else measures:

- training steps: ``recorder.clock.step_begin()`` / ``fetched(seconds)`` /
  ``step_done(samples=, tokens=)`` (`accelkit.profiling.clock.StepClock`);
- the run's other phases: `pause` / `resume` around evaluation (``"evaluation"``)
  or anything else that is not training (``"other"``), or `attribute` when the
  framework only says so afterwards; their time is reported beside the training
  figures and counts in none of them (step time, samples/s, MFU, input wait, the
  GPU figures);
- figures for the loggers: `take_figures` (the windows since the last call, by
  `accelkit.profiling.metrics` name; the door spells them for its ecosystem);
- the report: `measurements` (what `accelkit.profiling.assemble` turns into a
  `RunReport`).

The recorder owns the clock, the NVML sampler, the notes and the facts; the door
owns what only its framework can read (the device, its memory, the FLOP count, the
FLOPs that run in float8: `set_float8_flops`).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from accelkit.planning import Plan
from accelkit.profiling import mfu
from accelkit.profiling.assemble import Measurements
from accelkit.profiling.clock import ClockSummary, StepClock
from accelkit.profiling.flop_count import FlopCount
from accelkit.profiling.metrics import window_figures
from accelkit.profiling.options import MeterOptions
from accelkit.profiling.sampler import NvmlSampler

if TYPE_CHECKING:
    from typing_extensions import Self


class Recorder:
    """Measures one run for a door: steps and phases in, figures and measurements out.

    Args:
        options: the door's validated `MeterOptions`.
        plan: the plan in force (resolved by the door: the option, the last
            ``auto_configure()`` plan, or a fresh one).
        sync: waits for the device's queued work; None on the CPU.
        gpus: NVML indices of the GPUs this process uses ([] on the CPU).
        warmup: steps of warm-up when the door needs more than the option (a counted
            first step); None: the option's.

    Attributes:
        clock: the `StepClock` the door reports steps to.
        sampler: the `NvmlSampler` (started by `start`, stopped by `stop`).
        notes: why a figure is missing or how it was had, by `RunReport` field.
        facts: what the advisor reads besides the figures (`accelkit.advisor.context`).
        losses: one mean training loss per epoch, as the door reads them.
        eval_losses: one mean evaluation loss per evaluation, where the door reads them.
        peak: the dense peak MFU is taken against (`set_peak`), or None.
        float8_peak: the fp8 dense peak of the same devices (`set_peak`), or None.
        float8_flops_per_step: the FLOPs of one step that run in float8
            (`set_float8_flops`), or None.

    Example:
        >>> import time
        >>> recorder = Recorder(MeterOptions(warmup=0, window=2, sample_gpu=False), plan=None)
        >>> with recorder:
        ...     for step in range(4):
        ...         recorder.clock.step_done(samples=8)
        ...         if step == 1:
        ...             with recorder.phase("evaluation"):
        ...                 time.sleep(0.01)
        >>> summary = recorder.clock.finish()
        >>> summary.steady_samples, summary.phase_s["evaluation"] >= 0.01
        (32, True)
    """

    def __init__(
        self,
        options: MeterOptions,
        *,
        plan: Plan | None,
        sync: Callable[[], None] | None = None,
        gpus: Sequence[int] = (),
        warmup: int | None = None,
    ) -> None:
        self.options = options
        self.plan = plan
        self.clock = StepClock(
            sync, warmup=options.warmup if warmup is None else warmup, window=options.window
        )
        self.sampler = NvmlSampler(list(gpus) if options.sample_gpu else [])
        self.clock.on_window = self._window_ended
        self.clock.on_break = self.sampler.exclude
        self.notes: dict[str, str] = {}
        self.facts: dict[str, Any] = {}
        self.losses: list[float] = []
        self.eval_losses: list[float] = []
        self.flops: FlopCount | None = None
        self.peak: mfu.Peak | None = None
        self.float8_peak: mfu.Peak | None = None
        self.float8_flops_per_step: float | None = None
        self._listeners: list[Callable[[float, int], None]] = []
        self._taken_at = time.perf_counter()
        self._started = False
        self._summary: ClockSummary | None = None

    # -- lifecycle -------------------------------------------------------------------

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start the sampler (idempotent)."""
        if not self._started:
            self._started = True
            self.sampler.start()

    def stop(self) -> None:
        """Stop the sampler; for a run that ends, however it ends."""
        self.sampler.stop()

    # -- what the door tells it ------------------------------------------------------

    def note(self, field: str, reason: str) -> None:
        """Say in the report why `field` is missing or how it was obtained."""
        self.notes[field] = f"{self.notes[field]}; {reason}" if field in self.notes else reason

    def set_flops(self, count: FlopCount) -> None:
        """The counted FLOPs of one step; where some ran in float8 (`FlopCount.float8`),
        those too (`set_float8_flops`), as a step counted afterwards without them clears."""
        self.flops = count
        self.set_float8_flops(count.float8 or None)

    @property
    def flops_per_step(self) -> float | None:
        """The user's figure, else the counted one, else None."""
        if self.options.flops_per_step is not None:
            return self.options.flops_per_step
        return float(self.flops.total) if self.flops is not None and self.flops.total else None

    @property
    def hardware_flops_per_step(self) -> float | None:
        """The counted FLOPs with the forward activation checkpointing recomputed (HFU's);
        None when the user gave the figure (what it holds is not known) or none was counted."""
        if self.options.flops_per_step is not None or self.flops is None:
            return None
        hardware = self.flops.hardware
        return float(hardware) if hardware else None

    def set_float8_flops(self, flops_per_step: float | None) -> None:
        """The FLOPs of one training step that run in float8 from now on (a door that
        converts layers to float8: 6 x in_features x out_features x tokens summed over
        the converted ``nn.Linear``, counted like `flops_per_step`); None or 0 when none
        do (a float8 candidate undone). Every window taken after it and the run's report
        give ``float8_share`` and ``precision_mfu`` from it (`metrics.float8_figures`).

        Raises:
            ValueError: `flops_per_step` is negative or not finite.

        Example:
            >>> recorder = Recorder(MeterOptions(sample_gpu=False), plan=None)
            >>> recorder.set_float8_flops(6 * 4096 * 4096 * 8192)
            >>> recorder.float8_flops_per_step
            824633720832.0
        """
        if flops_per_step is None:
            self.float8_flops_per_step = None
            return
        if not (math.isfinite(flops_per_step) and flops_per_step >= 0):
            raise ValueError(
                f"float8 FLOPs per step must be a finite number >= 0 or None, "
                f"got {flops_per_step!r}"
            )
        self.float8_flops_per_step = float(flops_per_step) or None

    def set_peak(self, hardware: Any, dtype: str, *, devices: int = 1, gpu: int = 0) -> None:
        """The dense peak for the window figures' MFU: the report's (`mfu.peak`), and the
        fp8 one for the float8 figures."""
        self.peak = mfu.peak(hardware, dtype, devices=devices, gpu=gpu)
        self.float8_peak = mfu.peak(hardware, mfu.FLOAT8, devices=devices, gpu=gpu)

    def on_window(self, listener: Callable[[float, int], None]) -> None:
        """Call ``listener(step_seconds, step)`` at each steady window's end (the device
        synchronised: reading a device value there costs no wait)."""
        self._listeners.append(listener)

    def _window_ended(self, step_s: float, step: int) -> None:
        if (steady := self.clock.warmup_end) is not None:  # the sampler keeps totals from it
            self.sampler.keep_totals_from(steady)
        for listener in self._listeners:
            listener(step_s, step)

    # -- phases ----------------------------------------------------------------------

    def pause(self, phase: str) -> None:
        """`phase` (``"evaluation"`` or ``"other"``) begins: training time stops."""
        self.clock.pause(phase)

    def resume(self) -> None:
        """Training time runs again (also at the next step, by itself)."""
        self.clock.resume()

    def attribute(self, phase: str, *, mid_epoch: bool = False) -> None:
        """The time since the last step was `phase` (a hook that comes afterwards);
        `mid_epoch`: the next batch's wait is input wait (`StepClock.attribute`)."""
        self.clock.attribute(phase, mid_epoch=mid_epoch)

    @contextlib.contextmanager
    def phase(self, phase: str) -> Iterator[None]:
        """``with recorder.phase("evaluation"): ...``: that block is not training."""
        self.pause(phase)
        try:
            yield
        finally:
            self.resume()

    # -- out -------------------------------------------------------------------------

    def take_figures(self, *, close: bool = False) -> dict[str, float]:
        """The figures of the steady windows since the last call (`metrics.window_figures`),
        by `accelkit.profiling.metrics` name. ``close=True`` ends the open window first
        (a device synchronisation: for points that pay one anyway, an epoch's end)."""
        sums = self.clock.take(close=close)
        since, self._taken_at = self._taken_at, time.perf_counter()
        gpu = self.sampler.summary(since, None) if self.sampler.running else None
        return window_figures(
            sums,
            flops_per_step=self.flops_per_step,
            hardware_flops_per_step=self.hardware_flops_per_step,
            peak_tflops=self.peak.tflops if self.peak is not None else None,
            float8_flops_per_step=self.float8_flops_per_step,
            float8_peak_tflops=self.float8_peak.tflops if self.float8_peak is not None else None,
            gpu=gpu if gpu is not None and gpu.samples else None,
            unmeasured=self.notes.keys(),
        )

    def finish(self) -> ClockSummary:
        """End the clock (its last window, a synchronisation: the window listeners run
        once more); idempotent."""
        if self._summary is None:
            self._summary = self.clock.finish()
        return self._summary

    def measurements(self, **door: Any) -> Measurements:
        """End the clock and give everything measured, with the door's own fields
        (framework, model, device, hardware, and what only it can read)."""
        summary = self.finish()
        notes = dict(self.notes)
        if self.sampler.notes:
            notes["gpu_utilization"] = "; ".join(self.sampler.notes)
        return Measurements(
            plan=door.pop("plan", self.plan),
            clock=summary,
            flops=self.flops,
            flops_per_step=self.options.flops_per_step,
            float8_flops_per_step=door.pop("float8_flops_per_step", self.float8_flops_per_step),
            sampler=self.sampler.summary(self.clock.warmup_end, None),
            losses=list(self.losses),
            eval_losses=list(self.eval_losses),
            notes={**notes, **door.pop("notes", {})},
            single_device_samples_per_second=self.options.single_device,
            **door,
        )
