"""Step timing that respects device asynchrony, shared by every framework's meter.

GPU frameworks return from a training step as soon as its kernels are queued,
so a host timer around one step measures the launch, not the work. The clock
therefore synchronises the device only at window boundaries (every `window`
steps, at the end of warm-up and at the end of the run) and derives steady-state
figures from the time between synchronised boundaries: over a window, queued
work cannot hide. Between boundaries it only reads `time.perf_counter()`, so
the per-step cost is two clock reads and a few additions.

Tokens are counted per step as given; real (unpadded) tokens may come as a count
still on the device (a mask's sum), added there and read once at the end.

Input wait is the time the training loop spends waiting for its next batch:
the gap between the end of one step and the start of the next (hand-written
loops), or the time spent in the iterator's `next()` (fits that own the loop).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

_now = time.perf_counter


@dataclasses.dataclass
class ClockSummary:
    """What the clock measured; steady-state figures exclude warm-up."""

    steps: int
    warmup_steps: int
    warmup_s: float | None
    steady_steps: int
    steady_s: float | None
    steady_samples: int
    steady_tokens: int
    input_wait_s: float
    total_s: float
    window_step_s: list[float]
    # Tokens that are not padding, when every steady step that had tokens said how
    # many (from an attention mask); else None.
    steady_real_tokens: int | None = None

    @property
    def step_s(self) -> float | None:
        if not self.steady_s or not self.steady_steps:
            return None
        return self.steady_s / self.steady_steps

    @property
    def input_wait_share(self) -> float | None:
        if not self.steady_s:
            return None
        return min(1.0, self.input_wait_s / self.steady_s)


class StepClock:
    """Counts steps, samples and input wait; synchronises only at window boundaries.

    Args:
        sync: waits until the device has finished queued work (e.g.
            `torch.cuda.synchronize`); None on the CPU.
        warmup: steps excluded from steady-state figures (compilation, autotuning).
        window: steps between synchronisations.

    Example:
        >>> clock = StepClock(sync=None, warmup=1, window=10)
        >>> for batch in batches:
        ...     clock.fetched(wait_s)        # optional: measured input wait
        ...     train_step(batch)
        ...     clock.step_done(samples=len(batch))
        >>> summary = clock.finish()
    """

    def __init__(self, sync: Callable[[], None] | None = None, *, warmup: int = 3,
                 window: int = 50) -> None:
        if warmup < 0 or window < 1:
            raise ValueError(f"warmup={warmup} must be >= 0 and window={window} >= 1")
        self._sync = sync
        self.warmup = warmup
        self.window = window
        self.steps = 0
        self._start = _now()
        self._steady_start: float | None = None if warmup else self._start
        self._window_start = self._start
        self._last_boundary_step = 0
        self._samples = 0
        self._tokens = 0
        self._real_tokens: Any = 0  # an int, or a count still on the device
        self._real_seen = self._real_missing = False
        self._input_wait = 0.0
        self._window_step_s: list[float] = []
        self._last_step_end: float | None = None
        self._step_open: float | None = None
        self.on_window: Callable[[float, int], None] | None = None

    # -- the per-step path: keep it cheap --------------------------------------------

    def step_begin(self) -> None:
        """Mark the start of a step; the gap since the last step counts as input wait."""
        now = _now()
        if self._last_step_end is not None and self._steady():
            self._input_wait += now - self._last_step_end
        self._step_open = now

    def fetched(self, wait_s: float) -> None:
        """Add input wait measured by the caller (time blocked in the iterator)."""
        if self._steady():
            self._input_wait += wait_s

    def step_done(self, samples: int = 0, tokens: int = 0, real_tokens: Any = None) -> None:
        """Count one step: its samples, its tokens (padding included) and, when known,
        its real tokens (padding excluded).

        `real_tokens` may be an int or a count still on the device (a 0-d tensor such
        as ``mask.sum()``): it is added where it lives, with no synchronisation, and
        read once, in `finish`, after the device has finished anyway. None: not known
        for this step, so the run has no real-token figure.
        """
        self.steps += 1
        if self._steady_start is not None:
            self._samples += samples
            self._tokens += tokens
            if real_tokens is not None:
                self._real_tokens = self._real_tokens + real_tokens
                self._real_seen = True
            elif tokens:
                self._real_missing = True
        if self.steps == self.warmup:
            self._boundary()
            self._steady_start = self._window_start
        elif self.steps - self._last_boundary_step >= self.window:
            self._boundary()
        self._last_step_end = _now()
        self._step_open = None

    def _steady(self) -> bool:
        return self._steady_start is not None

    # -- boundaries ------------------------------------------------------------------

    def _boundary(self) -> None:
        if self._sync is not None:
            self._sync()
        now = _now()
        steps = self.steps - self._last_boundary_step
        if steps and self._steady_start is not None:
            per_step = (now - self._window_start) / steps
            self._window_step_s.append(per_step)
            if self.on_window is not None:
                self.on_window(per_step, self.steps)
        self._window_start = now
        self._last_boundary_step = self.steps

    @property
    def warmup_end(self) -> float | None:
        return self._steady_start

    def finish(self) -> ClockSummary:
        """Synchronise once more and summarise; callable once, at the end of a run."""
        if self.steps > self._last_boundary_step:
            self._boundary()
        end = self._window_start
        steady_steps = max(0, self.steps - self.warmup)
        steady_s = (end - self._steady_start) if self._steady_start and steady_steps else None
        warmup_s = (self._steady_start - self._start) if self.warmup and self._steady_start else None
        return ClockSummary(
            steps=self.steps,
            warmup_steps=min(self.warmup, self.steps),
            warmup_s=warmup_s,
            steady_steps=steady_steps,
            steady_s=steady_s,
            steady_samples=self._samples,
            steady_tokens=self._tokens,
            input_wait_s=self._input_wait,
            total_s=end - self._start,
            window_step_s=self._window_step_s,
            # After the boundary's synchronisation: reading a device count costs no wait.
            steady_real_tokens=(int(self._real_tokens)
                                if self._real_seen and not self._real_missing else None),
        )
