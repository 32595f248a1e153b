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

import contextlib
import dataclasses
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any

from accelkit.profiling.flop_count import StepFlops

_now = time.perf_counter
_NO_FLOPS = StepFlops(0.0, 0.0, 0.0)

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


EVALUATION = "evaluation"
OTHER = "other"
PHASES = (EVALUATION, OTHER)  # what a run's wall time holds besides its training steps


@dataclasses.dataclass
class WindowSums:
    """Steady-state training figures added up over some windows (`StepClock.take`)."""

    steps: int = 0
    samples: int = 0
    tokens: int = 0
    input_wait_s: float = 0.0
    seconds: float = 0.0
    # The steps' own FLOPs added up, where every step of the windows had them (a door
    # that counts each batch's shape: `accelkit.profiling.flops_shapes`); else None.
    flops: StepFlops | None = None

    def add(self, other: WindowSums) -> None:
        if not self.steps:
            self.flops = other.flops
        elif other.steps:
            self.flops = self.flops + other.flops if self.flops and other.flops else None
        self.steps += other.steps
        self.samples += other.samples
        self.tokens += other.tokens
        self.input_wait_s += other.input_wait_s
        self.seconds += other.seconds


@dataclasses.dataclass
class ClockSummary:
    """What the clock measured; steady-state figures exclude warm-up, and every
    training figure excludes the time of the run's other phases (evaluation, the rest)."""

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
    # The steady steps' own FLOPs added up, when every one had them (`StepClock.step_done`).
    steady_flops: StepFlops | None = None
    # One point per steady-state window (bounded: `BoundedSeries`): its end in seconds
    # since `started`, the step count there, seconds per step, samples per second and
    # input wait per step.
    series: dict[str, list[float | None]] = dataclasses.field(default_factory=dict)
    started: float | None = None  # time.perf_counter() when the clock started
    # Wall seconds of the run's phases besides training (`PHASES`), and the wall-clock
    # intervals (perf_counter start, end) they took, for the GPU sampler.
    phase_s: dict[str, float] = dataclasses.field(default_factory=dict)
    breaks: list[tuple[float, float]] = dataclasses.field(default_factory=list)

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

    @property
    def training_s(self) -> float:
        """Wall seconds of training: the run less its other phases."""
        return max(0.0, self.total_s - sum(self.phase_s.values()))


WINDOW_COLUMNS = ("time_s", "step", "step_time_s", "samples_per_second", "input_wait_s")
_MAX_BREAKS = 4096  # break intervals kept for the sampler; later ones merge into the last


class StepClock:
    """Counts steps, samples and input wait; synchronises only at window boundaries.

    The clock runs on training time: while the run evaluates (`pause`) or does
    anything else between steps that is not waiting for a batch (`attribute`), its
    hands stop, so those seconds count in `phase_s` and in no step, window or input
    wait. The gap after such a break until the next step (a new epoch's iterator, its
    first batch) counts as the rest of the run, not as input wait.

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
        ...     if clock.steps == 10:
        ...         clock.pause(EVALUATION)
        ...         time.sleep(0.05)         # evaluation: counted apart
        ...         clock.resume()
        >>> summary = clock.finish()
        >>> summary.steady_steps, summary.steady_samples
        (19, 608)
        >>> summary.phase_s[EVALUATION] > 0.05 > summary.steady_s
        True
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
        self._wall_start = _now()
        self._stopped = 0.0  # seconds the hands stood still (other phases)
        self._start = self._t()
        self._steady_start: float | None = None if warmup else self._start
        self._window_start = self._start
        self._steady_wall: float | None = None if warmup else self._wall_start
        self._last_boundary_step = 0
        self._samples = 0
        self._tokens = 0
        self._real_tokens: Any = 0  # an int, or a count still on the device
        self._real_seen = self._real_missing = False
        self._flops: StepFlops | None = _NO_FLOPS  # None once a steady step came without
        self._window_flops: StepFlops | None = _NO_FLOPS  # at the last boundary
        self._input_wait = 0.0
        self._window_step_s: list[float] = []
        self._series = BoundedSeries(WINDOW_COLUMNS)
        self._window_samples = 0  # counters at the last boundary
        self._window_tokens = 0
        self._window_wait = 0.0
        self._taken = WindowSums()  # windows ended since the last `take`
        self._last_step_end: float | None = None
        self._phase_s: dict[str, float] = {}
        self._breaks: list[tuple[float, float]] = []
        self._paused: tuple[str, float] | None = None  # (phase, wall time it began)
        self._after_break = False  # the gap to the next step is the rest, not input wait
        self.on_window: Callable[[float, int], None] | None = None
        # Told each break's wall-clock interval (perf_counter start, end) as it ends.
        self.on_break: Callable[[float, float], None] | None = None

    def _t(self) -> float:
        """Training time: the wall clock less the seconds of the other phases."""
        return _now() - self._stopped

    # -- the per-step path: keep it cheap --------------------------------------------

    def step_begin(self) -> None:
        """Mark the start of a step; the gap since the last step counts as input wait."""
        if self._paused is not None:
            self.resume()
        if self._last_step_end is None:
            return
        if self._after_break:
            self._after_break = False
            self._stop_hands(OTHER, self._t() - self._last_step_end)
        elif self.steady:
            self._input_wait += self._t() - self._last_step_end

    def fetched(self, wait_s: float) -> None:
        """Add input wait measured by the caller (time blocked in the iterator).

        The first fetch after a break (a new epoch's iterator) belongs to the rest of
        the run."""
        if self._after_break:
            self._after_break = False
            self._stop_hands(OTHER, wait_s)
        elif self.steady:
            self._input_wait += wait_s

    def step_done(
        self,
        samples: int = 0,
        tokens: int = 0,
        real_tokens: Any = None,
        flops: StepFlops | None = None,
    ) -> None:
        """Count one step: its samples, its tokens (padding included) and, when known,
        its real tokens (padding excluded) and its own FLOPs (`flops`: the windows and
        the run then add up every step's own; one step without them, and the figures
        fall back on the one count of the run, `Recorder.flops_per_step`).

        `real_tokens` may be an int or a count still on the device (a 0-d tensor such
        as ``mask.sum()``): it is added where it lives, with no synchronisation, and
        read once, in `finish`, after the device has finished anyway. None: not known
        for this step, so the run has no real-token figure.
        """
        if self._paused is not None:
            self.resume()
        self._after_break = False
        self.steps += 1
        if self._steady_start is not None:
            self._samples += samples
            self._tokens += tokens
            if real_tokens is not None:
                self._real_tokens = self._real_tokens + real_tokens
                self._real_seen = True
            elif tokens:
                self._real_missing = True
            self._flops = self._flops + flops if self._flops and flops else None
        if self.steps == self.warmup:
            self._boundary()
            self._steady_start, self._steady_wall = self._window_start, _now()
        elif self.steps - self._last_boundary_step >= self.window:
            self._boundary()
        self._last_step_end = self._t()

    @property
    def steady(self) -> bool:
        """Whether warm-up is over: the next step counts in the steady figures."""
        return self._steady_start is not None

    # -- the other phases ------------------------------------------------------------

    def pause(self, phase: str) -> None:
        """Stop training time: what follows is `phase` (`EVALUATION` or `OTHER`) until
        `resume` or the next step. The device is synchronised first, so training work
        still queued counts as training; the gap since the last step is the rest.
        A pause while paused switches to `phase`."""
        if phase not in PHASES:
            raise ValueError(f"phase={phase!r}: expected one of {', '.join(PHASES)}")
        if self._paused is not None:
            if self._paused[0] == phase:
                return
            self.resume()
        began = _now()
        if self._sync is not None:
            self._sync()
        if self._last_step_end is not None:
            # The wait for the last steps' queued work is training; the gap before it is not.
            self._stop_hands(OTHER, self._t() - self._last_step_end - (_now() - began))
            self._last_step_end = self._t()
        self._paused = (phase, _now())

    def resume(self) -> None:
        """Start training time again (no-op when not paused); synchronises first, so the
        phase's queued work counts in the phase."""
        if self._paused is None:
            return
        if self._sync is not None:
            self._sync()
        phase, began = self._paused
        self._paused = None
        self._stop_hands(phase, _now() - began)

    def attribute(self, phase: str, *, mid_epoch: bool = False) -> None:
        """The time since the last step (or the last break) was `phase`, not input wait:
        for hooks that come after the fact (a trainer's "evaluation ended", "saved").

        Args:
            phase: `EVALUATION` or `OTHER`.
            mid_epoch: the next batch comes from the same iterator, so the gap to the
                next step is input wait again (else it is the rest: a new epoch).
        """
        if phase not in PHASES:
            raise ValueError(f"phase={phase!r}: expected one of {', '.join(PHASES)}")
        if self._paused is not None or self._last_step_end is None:
            return
        self._stop_hands(phase, self._t() - self._last_step_end)
        if mid_epoch:
            self._after_break = False

    def _stop_hands(self, phase: str, seconds: float) -> None:
        """Move `seconds` that just passed out of training time into `phase`."""
        if seconds <= 0:
            return
        self._stopped += seconds
        self._phase_s[phase] = self._phase_s.get(phase, 0.0) + seconds
        end = _now()
        if len(self._breaks) < _MAX_BREAKS:
            self._breaks.append((end - seconds, end))
        else:
            self._breaks[-1] = (self._breaks[-1][0], end)
        self._after_break = True
        if self.on_break is not None:
            self.on_break(end - seconds, end)

    @contextlib.contextmanager
    def apart(self, phase: str = OTHER) -> Iterator[None]:
        """``with clock.apart():`` what runs inside is not training, even within a step
        (a FLOP count's own pass): the device is synchronised before and after, and the
        seconds between count in `phase`, in no step, window or input wait."""
        self.synchronize()
        began = _now()
        try:
            yield
        finally:
            self.synchronize()
            self._stop_hands(phase, _now() - began)

    @property
    def elapsed_s(self) -> float:
        """Wall seconds since the clock started (training and every other phase)."""
        return _now() - self._wall_start

    def synchronize(self) -> None:
        """Wait for the device's queued work (nothing on the CPU)."""
        if self._sync is not None:
            self._sync()

    @property
    def phase_s(self) -> dict[str, float]:
        """Seconds of each phase besides training so far (`PHASES`)."""
        return dict(self._phase_s)

    @property
    def paused(self) -> str | None:
        """The phase the clock is paused in, or None."""
        return self._paused[0] if self._paused is not None else None

    # -- boundaries ------------------------------------------------------------------

    def _boundary(self) -> None:
        if self._sync is not None:
            self._sync()
        now = self._t()
        steps = self.steps - self._last_boundary_step
        if steps and self._steady_start is not None:
            seconds = now - self._window_start
            per_step = seconds / steps
            self._window_step_s.append(per_step)
            window = WindowSums(
                steps=steps,
                samples=self._samples - self._window_samples,
                tokens=self._tokens - self._window_tokens,
                input_wait_s=self._input_wait - self._window_wait,
                seconds=seconds,
                flops=_less(self._flops, self._window_flops),
            )
            self._taken.add(window)
            self._series.add(
                (
                    _now() - self._wall_start,
                    float(self.steps),
                    per_step,
                    window.samples / seconds if seconds > 0 and window.samples else None,
                    window.input_wait_s / steps,
                )
            )
            if self.on_window is not None:
                self.on_window(per_step, self.steps)
        self._window_start = now
        self._last_boundary_step = self.steps
        self._window_samples, self._window_tokens = self._samples, self._tokens
        self._window_wait = self._input_wait
        self._window_flops = self._flops

    def take(self, *, close: bool = False) -> WindowSums:
        """The steady windows that ended since the last call, added up; the sums start
        again. ``close=True`` first ends the open window (a device synchronisation: for
        points where the caller pays one anyway, such as an epoch's end).

        Example:
            >>> clock = StepClock(None, warmup=0, window=100)
            >>> for _ in range(4):
            ...     clock.step_done(samples=32)
            >>> clock.take().steps, clock.take(close=True).samples
            (0, 128)
        """
        if close and self.steps > self._last_boundary_step:
            self._boundary()
            if self._last_step_end is not None:  # the gap up to here is in the window now
                self._last_step_end = max(self._last_step_end, self._window_start)
        taken, self._taken = self._taken, WindowSums()
        return taken

    @property
    def warmup_end(self) -> float | None:
        """The wall time (perf_counter) at which steady state began, or None."""
        return self._steady_wall

    def finish(self) -> ClockSummary:
        """Synchronise once more and summarise; callable once, at the end of a run."""
        self.resume()
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
            total_s=end - self._start + self._stopped,
            window_step_s=self._window_step_s,
            # After the boundary's synchronisation: reading a device count costs no wait.
            steady_real_tokens=(
                int(self._real_tokens) if self._real_seen and not self._real_missing else None
            ),
            steady_flops=self._flops if self._flops and self._flops.model else None,
            series=self._series.columns() if len(self._series) else {},
            started=self._wall_start,
            phase_s=dict(self._phase_s),
            breaks=list(self._breaks),
        )


def _less(now: StepFlops | None, then: StepFlops | None) -> StepFlops | None:
    """The FLOPs added between two readings of the running sum: None where a step in
    between had none (or no step had any)."""
    if now is None or then is None or now.model <= then.model:
        return None
    return now + then.times(-1.0)
