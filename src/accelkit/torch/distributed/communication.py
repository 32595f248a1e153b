"""How long each step of a DistributedDataParallel run waits for the gradient all-reduce.

DDP overlaps the all-reduce with the backward pass: it cuts the gradients into
buckets and launches a bucket's all-reduce as soon as the backward pass has
produced its last gradient. What the overlap cannot hide is the time from the
moment the backward pass produced its last gradient (the last bucket's launch)
to the moment the last all-reduce completes; the optimizer step waits for it.

The method (`TimedHook`, a DDP communication hook, and `GradientTimer`):

- the hook runs the all-reduce DDP would run without a hook (divide by the world
  size, then all-reduce the bucket, as PyTorch's ``default_hooks.allreduce_hook``),
  or the bf16 one of ``default_hooks.bf16_compress_hook`` when asked, and marks two
  moments per bucket: its launch (ready) and its completion (done);
- on CUDA a mark is a ``torch.cuda.Event(enable_timing=True)``: ``ready`` recorded on
  the backward pass's stream when DDP calls the hook, ``done`` in the all-reduce
  future's ``then`` callback, which runs on a stream that waits for NCCL's kernels,
  so the event completes when the reduced bucket is back. The events are read only
  where the meter synchronises the device anyway (window boundaries, the end of the
  run): timing adds no synchronisation. On the CPU (gloo), the marks are
  ``time.perf_counter()`` at launch and in the callback gloo runs on completion;
- the first `FIRST_PASSES` backward passes are timed, then one in `SAMPLE_EVERY`;
- per timed backward pass: exposed = the last completion - the last bucket's launch (>= 0:
  no all-reduce can end before its bucket was launched); in flight = the time at
  least one all-reduce was launched and not complete (the union of [ready, done]),
  queueing behind an earlier bucket included.

The cost: per bucket two marks, four ``perf_counter`` reads and one closure (the
default hook's own ``then`` callback is reused); `GradientTimer.host_s` adds it up
(``facts["communication"]["hook_host_us"]`` per step; docs/distributed.md has the
figures). A failure in the timing stops the timing, with a note; the all-reduce goes
on. ``ACCELKIT_COMM_TIMING=0`` registers no hook at all.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

from accelkit.utils.imports import require

_log = logging.getLogger("accelkit")
_now = time.perf_counter

BF16 = "bf16"
NONE = "none"
COMPRESSIONS = (NONE, BF16)
METHOD_CUDA = (
    "DDP communication hook: CUDA events at each bucket's launch and completion, "
    "read at the meter's synchronised window boundaries"
)
METHOD_HOST = (
    "DDP communication hook: host clock at each bucket's launch and at its "
    "completion callback (gloo)"
)
_MAX_PENDING = 1000  # timed backward passes kept unread at most; past it the oldest go
# Which backward passes are timed: the first FIRST_PASSES (short runs get figures),
# then one in SAMPLE_EVERY. Timing every pass cost 4.5% of a GPT-2 small step and 2.8%
# of a ResNet-50 step on an H200 (CUDA events and a Python callback per bucket, 13 and
# 4 buckets; docs/benchmarks.md); one in 20 costs a twentieth of that.
FIRST_PASSES = 8
SAMPLE_EVERY = 20


@dataclasses.dataclass
class _Reduction:
    """One backward pass's all-reduces: per bucket [ready, done, bytes]."""

    step: int
    buckets: list[list[Any]] = dataclasses.field(default_factory=list)


class GradientTimer:
    """Collects the launch and completion of each timed bucket's all-reduce (see the
    module docstring), and adds them up per backward pass.

    Args:
        device: where the model trains (CUDA: events; else the host clock).

    Attributes:
        step_of: ``step_of() -> int``, the meter's step count, to tell warm-up from
            steady-state reductions (`accelkit.torch.Meter` sets it).
        broken: why timing stopped, or None.
        host_s: seconds spent in the timing bookkeeping itself.

    `timed` registers it for a hand-written loop (its example shows it at work).
    """

    def __init__(self, device: Any) -> None:
        self._torch = require("torch")
        self._cuda = getattr(device, "type", "cpu") == "cuda"
        self.method = METHOD_CUDA if self._cuda else METHOD_HOST
        self.step_of: Callable[[], int] = lambda: 0
        self.broken: str | None = None
        self.host_s = 0.0
        self._open: _Reduction | None = None
        self._pending: list[_Reduction] = []
        # Read: (step, exposed s, in flight s, buckets, gradient bytes, bytes sent)
        self._timed: list[tuple[int, float, float, int, int, int]] = []
        self._pool: list[Any] = []
        self._passes = 0  # backward passes seen, timed or not
        self._skipping = False

    def follow(self, clock: Any) -> None:
        """Tag each reduction with `clock`'s step count, and read the marks at each of
        its window boundaries (`accelkit.profiling.clock.StepClock`, synchronised)."""
        self.step_of = lambda: clock.steps
        then = clock.on_window

        def on_window(step_s: float, step: int) -> None:
            self.read()
            if then is not None:
                then(step_s, step)

        clock.on_window = on_window

    # -- in the hook: keep it cheap ------------------------------------------------------

    def launch(self, bucket: Any, sent_bytes: int) -> Callable[[], None] | None:
        """Mark `bucket`'s launch; returns what marks its completion (None: not timed)."""
        if self.broken is not None:
            return None
        if bucket.index() == 0:  # a backward pass begins: timed or not, decided once
            self._passes += 1
            self._skipping = self._passes > FIRST_PASSES and self._passes % SAMPLE_EVERY != 0
        if self._skipping:
            return None
        started = _now()
        try:
            if bucket.index() == 0 or self._open is None:
                self._open = _Reduction(self.step_of())
            buffer = bucket.buffer()
            entry = [self._mark(), None, buffer.numel() * buffer.element_size(), sent_bytes]
            self._open.buckets.append(entry)
            if bucket.is_last():
                self._pending.append(self._open)
                self._open = None
                if len(self._pending) > _MAX_PENDING:
                    self._pending.pop(0)
        except Exception as error:  # noqa: BLE001 - timing must never stop the run
            self._stop(error)
            return None
        finally:
            self.host_s += _now() - started

        def done() -> None:
            begun = _now()
            try:
                entry[1] = self._mark()
            except Exception as error:  # noqa: BLE001
                self._stop(error)
            self.host_s += _now() - begun

        return done

    def _mark(self) -> Any:
        if not self._cuda:
            return _now()
        event = self._pool.pop() if self._pool else self._torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def _stop(self, error: BaseException) -> None:
        self.broken = f"the timing failed ({type(error).__name__}: {error}); not measured"
        self._pending.clear()
        self._open = None
        _log.debug("accelkit: gradient all-reduce timing stopped: %s", error)

    # -- where the device is synchronised anyway ---------------------------------------

    def read(self) -> None:
        """Turn the marks of finished backward passes into seconds. Call only where the
        device was just synchronised (CUDA events of unfinished work cannot be read)."""
        if self.broken is not None or not self._pending:
            return
        try:
            waiting = []
            for reduction in self._pending:
                if any(entry[1] is None for entry in reduction.buckets):
                    waiting.append(reduction)  # gloo still completing: read next time
                    continue
                self._timed.append(self._seconds(reduction))
            self._pending = waiting
        except Exception as error:  # noqa: BLE001 - timing must never stop the run
            self._stop(error)

    def _seconds(self, reduction: _Reduction) -> tuple[int, float, float, int, int, int]:
        buckets = reduction.buckets
        if self._cuda:
            first = buckets[0][0]
            spans = [
                (first.elapsed_time(ready) / 1e3, first.elapsed_time(done) / 1e3)
                for ready, done, _, _ in buckets
            ]
            for ready, done, _, _ in buckets:
                self._pool += (ready, done)
        else:
            spans = [(ready, done) for ready, done, _, _ in buckets]
        exposed = max(0.0, max(done for _, done in spans) - spans[-1][0])
        return (
            reduction.step,
            exposed,
            _union(spans),
            len(buckets),
            sum(entry[2] for entry in buckets),
            sum(entry[3] for entry in buckets),
        )

    def totals(self, warmup_steps: int) -> dict[str, Any] | None:
        """The reductions of steps from `warmup_steps` on (the steady state), added up:
        `accelkit.profiling.assemble.Measurements.communication`'s mapping; None when
        none was timed (the note says why)."""
        self.read()
        steady = [timed for timed in self._timed if timed[0] >= warmup_steps]
        if self.broken is not None or not steady:
            return None
        return {
            "exposed_s": sum(t[1] for t in steady),
            "in_flight_s": sum(t[2] for t in steady),
            "reductions": len(steady),
            "buckets": max(t[3] for t in steady),
            "gradient_bytes": max(t[4] for t in steady),
            "sent_bytes": max(t[5] for t in steady),
            "host_s": self.host_s * len(steady) / max(len(self._timed), 1),
            "method": self.method,
        }

    def why_missing(self, warmup_steps: int) -> str:
        """Why `totals` is None."""
        if self.broken is not None:
            return self.broken
        if not self._timed:
            return "no gradient all-reduce was timed (no backward pass through DDP)"
        return (
            f"no gradient all-reduce in the steady state (after step {warmup_steps}): "
            "run more steps"
        )


def _union(spans: list[tuple[float, float]]) -> float:
    """Length of the union of the intervals `spans`."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(spans):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


class TimedHook:
    """The DDP communication hook that times the all-reduce (`GradientTimer`).

    The all-reduce is PyTorch's own, as ``default_hooks.allreduce_hook`` runs it
    (divide by the world size, all-reduce, in the bucket's dtype), or as
    ``bf16_compress_hook`` does (cast to bf16, divide, all-reduce, copy back) when
    `compression` is ``"bf16"``. `compression` may change between steps (tune does).

    Args:
        timer: where the marks go; None runs the all-reduce untimed.
        compression: ``"none"`` or ``"bf16"``.

    Example: `GradientTimer`'s registers one.
    """

    def __init__(self, timer: GradientTimer | None, compression: str = NONE) -> None:
        self._torch = require("torch")
        self._dist = self._torch.distributed
        self.timer = timer
        self.compression = compression
        # Set by tune before the bf16 trial: compare the next bucket's bf16 all-reduce
        # with an fp32 one of the same gradients (`bf16_error`).
        self.probe = False
        self._probe_error: Any = None

    def register(self, ddp: Any) -> None:
        """Register this hook on the `DistributedDataParallel` model `ddp` (DDP takes one
        hook per model: a model that has one already raises RuntimeError)."""

        # DDP checks the hook's signature: `bucket` and the return stay unannotated (a
        # string annotation is not dist.GradBucket to its check).
        def accelkit_timed_allreduce_hook(state, bucket):  # type: ignore[no-untyped-def]
            return self.reduce(state, bucket)

        ddp.register_comm_hook(None, accelkit_timed_allreduce_hook)

    def reduce(self, state: Any, bucket: Any) -> Any:
        """All-reduce `bucket` (DDP calls it through `register`'s hook): a future of the
        averaged bucket."""
        torch, dist = self._torch, self._dist
        if torch.compiler.is_compiling():  # traced by compiled autograd: nothing to time
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

            bf16 = self.compression == BF16
            return (default_hooks.bf16_compress_hook if bf16 else default_hooks.allreduce_hook)(
                state, bucket
            )
        group = state if state is not None else dist.group.WORLD
        buffer = bucket.buffer()
        size = group.size()
        compressed = self.compression == BF16 and buffer.dtype != torch.bfloat16
        sent = buffer.numel() * (2 if compressed else buffer.element_size())
        mark = self.timer.launch(bucket, sent) if self.timer is not None else None
        reference = None
        if compressed and self.probe and bucket.index() == 0:
            self.probe = False
            reference = buffer.div(size)
            reference_future = dist.all_reduce(reference, group=group, async_op=True).get_future()
        # As default_hooks: divide first, so 16-bit sums cannot overflow.
        tensor = buffer.to(torch.bfloat16).div_(size) if compressed else buffer.div_(size)
        future = dist.all_reduce(tensor, group=group, async_op=True).get_future()

        def finish(done: Any) -> Any:
            value = done.value()[0]
            if compressed:
                buffer.copy_(value)  # in place, as bf16_compress_hook: no second buffer
                value = buffer
                if reference is not None:
                    reference_future.wait()  # on CUDA: a stream wait, not a host wait
                    self._probe_error = (buffer - reference).norm() / reference.norm().clamp_min(
                        1e-30
                    )
            if mark is not None:
                mark()
            return value

        return future.then(finish)

    def bf16_error(self) -> float | None:
        """Relative L2 error of the probed bucket's bf16 all-reduce against fp32
        (|bf16 - fp32| / |fp32|), once the device has finished; None before a probe."""
        if self._probe_error is None:
            return None
        value = float(self._probe_error)
        self._probe_error = None
        return value


def steady_totals(
    timer: GradientTimer | None, warmup_steps: int, notes: dict[str, str]
) -> dict[str, Any] | None:
    """`timer`'s steady-state totals for the report; when there are none, the reason
    goes to ``notes["communication_share"]``. None and nothing said without a timer."""
    if timer is None:
        return None
    found = timer.totals(warmup_steps)
    if found is None:
        notes.setdefault("communication_share", timer.why_missing(warmup_steps))
    return found


def timed(ddp: Any, meter: Any, compression: str = NONE) -> GradientTimer | None:
    """Time the gradient all-reduce of `ddp` (your `DistributedDataParallel` model) in a
    hand-written loop measured by `meter` (`accelkit.torch.Meter`): its report gets
    ``communication_s`` and ``communication_share`` per rank.

    Registers `TimedHook` on `ddp` (DDP takes one hook per model), before the first
    step. Returns the timer, or None with the reason in the report's notes when `ddp`
    has a hook already.

    Args:
        ddp: the model wrapped in `DistributedDataParallel`.
        meter: the loop's meter.
        compression: ``"none"`` (DDP's own all-reduce) or ``"bf16"``.

    Example:
        >>> import accelkit
        >>> import tempfile
        >>> import torch
        >>> import torch.distributed as dist
        >>> store = f"file://{tempfile.mkdtemp()}/store"   # a one-process group, for the example
        >>> dist.init_process_group("gloo", init_method=store, rank=0, world_size=1)
        >>> ddp_model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
        >>> optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
        >>> meter = accelkit.torch.Meter(ddp_model, warmup=1, window=2)
        >>> timer = accelkit.torch.distributed.communication.timed(ddp_model, meter)
        >>> with meter:
        ...     for _ in range(5):
        ...         x = torch.randn(8, 4)
        ...         with meter.step(x):
        ...             ddp_model(x).sum().backward()
        ...             optimizer.step()
        ...             optimizer.zero_grad()
        >>> meter.report().communication_s > 0
        True
        >>> dist.destroy_process_group()
    """
    timer = GradientTimer(next(ddp.parameters()).device)
    try:
        TimedHook(timer, compression).register(ddp)
    except Exception as error:  # noqa: BLE001 - a hook of the script's: keep it
        meter.note("communication_share", f"not timed: the model has a hook already ({error})")
        return None
    timer.follow(meter.clock)
    meter.communication = timer
    return timer
