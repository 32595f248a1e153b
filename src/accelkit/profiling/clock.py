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
from collections.abc import Callable, Collection, Sequence
from typing import Any

_now = time.perf_counter

SERIES_POINTS = 512  # the most points a saved series holds, however long the run


class BoundedSeries:
    """Rows of numbers kept to at most `limit` points, however many are added.

    When full, neighbouring points are merged in pairs and later rows are averaged in
    groups of the same size, so every middle point covers as many rows; the first and
    the last row are kept as they came. A column merges by its mean (None values left
    out), or by its maximum when named in `peak` (memory: the peak must survive).

    Example:
        >>> series = BoundedSeries(("time_s", "step_s"), limit=5)
        >>> for i in range(10):
        ...     series.add((float(i), 1.0))
        >>> series.columns()["time_s"]
        [0.0, 4.5, 9.0]
    """

    def __init__(
        self, names: Sequence[str], *, limit: int = SERIES_POINTS, peak: Collection[str] = ()
    ) -> None:
        if limit < 5:
            raise ValueError(f"limit={limit} must be >= 5 (the ends and three middle points)")
        self.names = tuple(names)
        self.limit = limit
        self._peak = [name in peak for name in self.names]
        self._first: Sequence[float | None] | None = None
        self._last: Sequence[float | None] | None = None
        self._middle: list[list[Any]] = []  # [rows, sums, counts, maxima] per point
        self._open: list[Any] | None = None
        self._stride = 1

    def __len__(self) -> int:
        return (
            (self._first is not None)
            + (self._last is not None)
            + len(self._middle)
            + (self._open is not None)
        )

    def add(self, row: Sequence[float | None]) -> None:
        """Append one row (a value per name, None where unknown)."""
        if self._first is None:
            self._first = row
            return
        if self._last is not None:
            self._absorb(self._last)
        self._last = row

    def _absorb(self, row: Sequence[float | None]) -> None:
        if self._open is None:
            self._open = [0, [0.0] * len(row), [0] * len(row), [None] * len(row)]
        bucket = self._open
        bucket[0] += 1
        for i, value in enumerate(row):
            if value is not None:
                bucket[1][i] += value
                bucket[2][i] += 1
                bucket[3][i] = value if bucket[3][i] is None else max(bucket[3][i], value)
        if bucket[0] >= self._stride:
            self._middle.append(bucket)
            self._open = None
            # an even count, so that every merged point covers as many rows
            if len(self._middle) >= (self.limit - 3) // 2 * 2:
                self._middle = [
                    self._merge(*self._middle[i : i + 2]) for i in range(0, len(self._middle), 2)
                ]
                self._stride *= 2

    @staticmethod
    def _merge(a: list[Any], b: list[Any] | None = None) -> list[Any]:
        if b is None:
            return a
        maxima = [
            x if y is None else y if x is None else max(x, y)
            for x, y in zip(a[3], b[3], strict=True)
        ]
        return [
            a[0] + b[0],
            [x + y for x, y in zip(a[1], b[1], strict=True)],
            [x + y for x, y in zip(a[2], b[2], strict=True)],
            maxima,
        ]

    def rows(self) -> list[tuple[float | None, ...]]:
        """The points, oldest first: the first row, the merged middle, the last row."""
        middle = self._middle + ([self._open] if self._open is not None else [])
        out = [tuple(self._first)] if self._first is not None else []
        for _, sums, counts, maxima in middle:
            out.append(
                tuple(
                    maxima[i] if self._peak[i] else (sums[i] / counts[i] if counts[i] else None)
                    for i in range(len(self.names))
                )
            )
        if self._last is not None:
            out.append(tuple(self._last))
        return out

    def columns(self) -> dict[str, list[float | None]]:
        """The points as one list per name (what a `RunReport` saves)."""
        rows = self.rows()
        return {name: [row[i] for row in rows] for i, name in enumerate(self.names)}


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
    # One point per steady-state window (bounded: `BoundedSeries`): its end in seconds
    # since `started`, the step count there, seconds per step, samples per second and
    # input wait per step.
    series: dict[str, list[float | None]] = dataclasses.field(default_factory=dict)
    started: float | None = None  # time.perf_counter() when the clock started

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


WINDOW_COLUMNS = ("time_s", "step", "step_time_s", "samples_per_second", "input_wait_s")


class StepClock:
    """Counts steps, samples and input wait; synchronises only at window boundaries.

    Args:
        sync: waits until the device has finished queued work (e.g.
            `torch.cuda.synchronize`); None on the CPU.
        warmup: steps excluded from steady-state figures (compilation, autotuning).
        window: steps between synchronisations.

    Example:
        >>> import time
        >>> clock = StepClock(sync=None, warmup=1, window=10)
        >>> for batch in [[0] * 32] * 20:
        ...     clock.fetched(0.001)         # optional: measured input wait
        ...     time.sleep(0.001)            # the training step
        ...     clock.step_done(samples=len(batch))
        >>> summary = clock.finish()
        >>> summary.steady_steps, summary.steady_samples
        (19, 608)
    """

    def __init__(
        self, sync: Callable[[], None] | None = None, *, warmup: int = 3, window: int = 50
    ) -> None:
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
        self._series = BoundedSeries(WINDOW_COLUMNS)
        self._window_samples = 0  # counters at the last boundary
        self._window_wait = 0.0
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
            seconds = now - self._window_start
            self._series.add(
                (
                    now - self._start,
                    float(self.steps),
                    per_step,
                    (self._samples - self._window_samples) / seconds
                    if seconds > 0 and self._samples
                    else None,
                    (self._input_wait - self._window_wait) / steps,
                )
            )
            if self.on_window is not None:
                self.on_window(per_step, self.steps)
        self._window_start = now
        self._last_boundary_step = self.steps
        self._window_samples, self._window_wait = self._samples, self._input_wait

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
        warmup_s = (
            (self._steady_start - self._start) if self.warmup and self._steady_start else None
        )
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
            steady_real_tokens=(
                int(self._real_tokens) if self._real_seen and not self._real_missing else None
            ),
            series=self._series.columns() if len(self._series) else {},
            started=self._start,
        )
