"""Each epoch's measured figures in Keras' ``logs``, for `CSVLogger`, `TensorBoard` and
`History`.

`ProfileCallback.on_epoch_end` adds them to the dict Keras hands every callback in
list order, so the callbacks after it record them (`History` and the progress bar come
last: Keras appends them). The figures of an epoch are those of the steady-state
windows that ended in it: a window ends where the clock synchronises the device, so
queued work cannot hide in them; a window that spans two epochs counts in the second.
An epoch where no window ended (fewer steps than `window`, or still in warm-up) and a
figure that is not known (MFU without a datasheet peak, tokens/s without tokens, input
wait under ``steps_per_execution > 1``) leave their keys out.

=================================  ============================================
key                                figure (as in `RunReport`)
=================================  ============================================
``accelkit_samples_per_second``    samples / s
``accelkit_tokens_per_second``     tokens / s (padding included)
``accelkit_mfu``                   achieved FLOP/s over the dense datasheet peak
``accelkit_input_wait_share``      share of the time spent waiting for batches
=================================  ============================================

Names use ``_`` only, so that a CSV column, a pandas attribute and a TensorBoard tag
(``epoch_accelkit_mfu``) all take them as they are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from accelkit.profiling.clock import StepClock

SAMPLES_PER_SECOND = "accelkit_samples_per_second"
TOKENS_PER_SECOND = "accelkit_tokens_per_second"
MFU = "accelkit_mfu"
INPUT_WAIT_SHARE = "accelkit_input_wait_share"
KEYS = (SAMPLES_PER_SECOND, TOKENS_PER_SECOND, MFU, INPUT_WAIT_SHARE)


@dataclasses.dataclass
class _Sums:
    steps: int = 0
    samples: int = 0
    tokens: int = 0
    wait_s: float = 0.0
    seconds: float = 0.0


class EpochClock(StepClock):
    """A `StepClock` that also sums the steady windows of the current epoch.

    It counts what the clock is given (`step_done`, `fetched`) since the last boundary,
    drops what came before the end of warm-up, and at each window's end adds the window
    to the epoch's sums.

    Example:
        >>> clock = EpochClock(None, warmup=0, window=2)
        >>> for _ in range(4):
        ...     clock.fetched(0.001)   # seconds waiting for the batch
        ...     clock.step_done(samples=32)
        >>> sorted(clock.epoch_logs(flops_per_step=None, peak_tflops=None))
        ['accelkit_input_wait_share', 'accelkit_samples_per_second']
    """

    def __init__(
        self, sync: Callable[[], None] | None = None, *, warmup: int = 3, window: int = 50
    ) -> None:
        super().__init__(sync, warmup=warmup, window=window)
        self._open = _Sums()  # since the last window boundary
        self._epoch = _Sums()  # the windows that ended in this epoch
        self._since = 0  # the step of the last boundary
        self.on_window = self._window_ended

    def fetched(self, wait_s: float) -> None:
        self._open.wait_s += wait_s
        super().fetched(wait_s)

    def step_done(self, samples: int = 0, tokens: int = 0, real_tokens: object = None) -> None:
        self._open.samples += samples
        self._open.tokens += tokens
        super().step_done(samples=samples, tokens=tokens, real_tokens=real_tokens)
        if self.steps == self.warmup:  # warm-up ended at this step: its batches are not steady
            self._open, self._since = _Sums(), self.steps

    def _window_ended(self, step_s: float, step: int) -> None:
        steps = step - self._since
        epoch, window = self._epoch, self._open
        epoch.steps += steps
        epoch.samples += window.samples
        epoch.tokens += window.tokens
        epoch.wait_s += window.wait_s
        epoch.seconds += step_s * steps
        self._open, self._since = _Sums(), step

    def epoch_logs(
        self,
        flops_per_step: float | None,
        peak_tflops: float | None,
        unmeasured: frozenset[str] | set[str] = frozenset(),
    ) -> dict[str, float]:
        """The figures of the windows that ended since the last call, by log key; the
        epoch's sums start again.

        Args:
            flops_per_step: FLOPs of one step, or None when not known.
            peak_tflops: the dense peak of the devices used, or None when not known.
            unmeasured: `RunReport` field names the run could not measure (its notes):
                ``"input_wait_share"`` or ``"samples_per_second"`` leave that key out.
        """
        sums, self._epoch = self._epoch, _Sums()
        if sums.seconds <= 0:
            return {}
        figures = {
            SAMPLES_PER_SECOND: sums.samples / sums.seconds
            if sums.samples and "samples_per_second" not in unmeasured
            else None,
            TOKENS_PER_SECOND: sums.tokens / sums.seconds if sums.tokens else None,
            MFU: flops_per_step * sums.steps / sums.seconds / 1e12 / peak_tflops
            if flops_per_step and peak_tflops
            else None,
            INPUT_WAIT_SHARE: min(1.0, sums.wait_s / sums.seconds)
            if "input_wait_share" not in unmeasured
            else None,
        }
        return {key: float(value) for key, value in figures.items() if value is not None}
