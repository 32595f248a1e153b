"""The third part of `accelkit.torch.fit`: the epochs, measured step by step.

Gradient accumulation (micro-steps under DDP's ``no_sync()``; under FSDP2 each
micro-step reduce-scatters, so the gradients stay sharded), the optimizer step,
the running loss (summed on the device, read once an epoch), an early stop on
KeyboardInterrupt, and the live progress line. The per-step path does no more
than the step itself and the meter's two clock reads: no device sync, no ``.item()``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from accelkit.profiling.clock import EVALUATION, OTHER
from accelkit.torch.distributed import parallel
from accelkit.torch.measuring.meter import Meter
from accelkit.torch.training.prepare import Prepared, to_device
from accelkit.torch.training.step import Step, TrainOne
from accelkit.utils import arguments, log
from accelkit.utils.imports import require

_log = logging.getLogger("accelkit")


class Trials(Protocol):
    """What tries the fit's options on the first batches (`accelkit.torch.tuning.tuner.Tuner`).

    The loop hands it the epoch's batches and its own `train_one`; it trains the trial
    steps through each candidate and returns the step the run goes on with. The loop
    runs it without importing it: tuning is built on the fit's `Step`, not the other
    way round.
    """

    def run(
        self,
        batches: Iterator[Any],
        train_one: TrainOne,
        limit_reached: Callable[[], bool],
        on_step: Callable[[], None] = ...,
    ) -> Step: ...

    @property
    def recount(self) -> bool:
        """The kept step runs some matmuls in another dtype than the step counted first
        (float8): the loop counts its next step's FLOPs again."""


@dataclasses.dataclass(frozen=True)
class Schedule:
    """How long to train and how often to step the optimizer; checked when built.

    Attributes:
        epochs: passes over the loader.
        steps: stop after this many steps in all (None: every epoch to the end).
        accumulation_steps: batches per optimizer step.
        partial: this schedule trains the start of a longer run (`accelkit.torch.tune`:
            the trials of a hand-written loop), whose length tune prices its candidates
            by: `planned` steps, None when unknown.
        planned: the longer run's length in steps, where `partial`.

    Example:
        >>> Schedule(epochs=0)
        Traceback (most recent call last):
        ValueError: epochs=0 must be a whole number >= 1
    """

    epochs: int = 1
    steps: int | None = None
    accumulation_steps: int = 1
    partial: bool = False
    planned: int | None = None

    def __post_init__(self) -> None:
        arguments.whole("epochs", self.epochs, 1)
        arguments.whole("steps", self.steps, 1, none="whole epochs")
        arguments.whole("accumulation_steps", self.accumulation_steps, 1)
        arguments.whole("planned", self.planned, 1, none="unknown")


def train(
    run: Prepared,
    step: Step,
    meter: Meter,
    schedule: Schedule,
    *,
    count_flops: bool,
    progress: bool,
    tuner: Trials | None = None,
    evaluate: Callable[[Step], float | None] | None = None,
) -> Step:
    """Train `run` through `step` for `schedule`, each step measured by `meter`.

    The caller enters `meter` around this call. One loss per epoch goes to
    ``meter.record_loss``; a KeyboardInterrupt ends the run early (``meter.interrupted``).
    With a `tuner`, the first batches of the first epoch train through its trials and
    the rest of the run through the step it keeps; the trials are the meter's warm-up.
    A loader that yields nothing in a later epoch (a generator, a one-shot iterator)
    ends the run there: ``meter.epochs`` becomes the epochs trained, with a note and a
    warning.

    Args:
        run, step: from `prepare` and `make_step`.
        meter: the open meter.
        schedule: epochs, step limit, accumulation.
        count_flops: count the first step's FLOPs (with ``step.count_flops``).
        progress: print live throughput to stderr every window.
        tuner: tries the options on the first batches (`accelkit.torch.tune`'s `Tuner`).
        evaluate: run after each epoch, in the meter's evaluation phase; its mean loss
            goes to ``meter.eval_losses`` (`accelkit.torch.training.evaluate`).

    Returns:
        The step the run ended with (the tuner's choice, when it tuned).

    Raises:
        ValueError: the loader yielded no batch.

    Example:
        >>> import accelkit
        >>> import torch
        >>> from accelkit.torch.measuring.meter import Meter
        >>> from accelkit.torch.training.prepare import prepare
        >>> from accelkit.torch.training.step import make_step
        >>> model, plan = torch.nn.Linear(4, 2), accelkit.plan_for(None)
        >>> loader = [(torch.randn(8, 4), torch.zeros(8).long())] * 3
        >>> run = prepare(model, loader, plan, device="cpu", channels_last=None, group=None)
        >>> optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        >>> step = make_step(run, plan, torch.nn.CrossEntropyLoss(), optimizer, compile=None,
        ...                  max_grad_norm=None)
        >>> meter = Meter(model, plan=plan, warmup=1, window=2)
        >>> with meter:
        ...     step = train(run, step, meter, Schedule(epochs=2), count_flops=True, progress=False)
        >>> meter.report().steps
        6
    """
    torch = require("torch")
    counter = _Counter(run, meter, schedule, torch.zeros((), device=run.device), count_flops)
    printer = _progress_printer(meter, _length(run.loader, schedule), counter.epoch_loss)
    meter.on_window = _watch_loss(meter, counter.running, printer if progress else None)
    try:
        for epoch in range(schedule.epochs):
            step = _epoch(counter, step, epoch, tuner, evaluate)
            if counter.limit_reached() or counter.dry:
                break
        _last_step(run, step, counter.done, schedule.accumulation_steps)
    except KeyboardInterrupt:
        _interrupted(meter, run, counter.done)
    return step


class _Counter:
    """One run's count of steps and its running loss, and `train_one`, which trains one
    batch and counts it: what the epochs share, and what the tuner trains its trials with.

    Attributes:
        done: steps trained in all (a step is a batch: a micro-step under accumulation).
        epoch_steps: steps trained in this epoch.
        running: this epoch's summed loss, on the device (read once an epoch).
        dry: the loader yielded nothing in a later epoch (`_ran_dry`).
    """

    def __init__(
        self, run: Prepared, meter: Meter, schedule: Schedule, running: Any, count_flops: bool
    ) -> None:
        self.run, self.meter, self.schedule = run, meter, schedule
        self.running = running
        self.count_flops = count_flops
        self.recount = False  # count the next step's FLOPs again (`Trials.recount`)
        self.done = self.epoch_steps = 0
        self.dry = False

    def epoch_loss(self) -> float | None:
        """This epoch's mean loss so far: read at window boundaries, where the device waits."""
        return float(self.running) / self.epoch_steps if self.epoch_steps else None

    def limit_reached(self) -> bool:
        return self.schedule.steps is not None and self.done >= self.schedule.steps

    def micro_step(self, batch: Any, step: Step, stepping: bool) -> Any:
        """Forward, loss and backward of one batch. Micro-steps that do not step the
        optimizer skip DDP's all-reduce; the gradients are summed locally and reduced on
        the stepping one. The step's own wrapper: tune may train through a re-wrapped one."""
        model = step.model if step.model is not None else self.run.model
        # DDP only: FSDP2 reduce-scatters every micro-step, so gradients stay sharded.
        skip = self.run.wrapping is not None and not stepping
        with _no_sync(model, skip):
            loss = step.forward_loss(batch)
            step.scaler.scale(loss / self.schedule.accumulation_steps).backward()
        return loss

    def train_one(self, batch: Any, step: Step, again: bool = False) -> Any:
        """Train one batch, measured, and count it (`accelkit.torch.training.step.TrainOne`)."""
        if again:  # counted already, in the unit of a trial that failed: its gradients only
            return self.micro_step(batch, step, stepping=False)
        if self.count_flops and self.done == 0:
            count = step.count_flops(batch)
            self.meter.set_flops(count, batches=[batch], count_batch=step.count_flops)
        elif self.recount:  # the kept step's, in place of the first's (the loop's or the meter's)
            self.recount = False
            self.meter.count_again([batch], step.count_flops)
        stepping = (self.done + 1) % self.schedule.accumulation_steps == 0
        with self.meter.step(batch):
            loss = self.micro_step(batch, step, stepping)
            if stepping:
                step.optimizer_step()
            self.running.add_(loss.detach().float())
        self.done += 1  # after the step: a trial step that failed is trained again
        self.epoch_steps += 1
        return loss


def _epoch(
    counter: _Counter,
    step: Step,
    epoch: int,
    tuner: Trials | None,
    evaluate: Callable[[Step], float | None] | None,
) -> Step:
    """Train one epoch (its first batches through the tuner's trials in the first epoch)
    and end it; returns the step the run goes on with."""
    run, meter = counter.run, counter.meter
    counter.epoch_steps = 0
    counter.running.zero_()
    if run.group is not None:
        parallel.set_epoch(run.loader, epoch)
    batches = (to_device(batch, run.device, run.layout) for batch in run.loader)
    if tuner is not None and epoch == 0:
        step = tuner.run(
            batches, counter.train_one, counter.limit_reached, on_step=meter.hold_warmup
        )
        counter.recount = tuner.recount
    # A partial schedule trains the trials alone: their count is bounded, not fixed (a
    # candidate's rounds may run twice), and the loop trains the batches after them.
    if not counter.limit_reached() and not counter.schedule.partial:
        for batch in batches:
            counter.train_one(batch, step)
            if counter.limit_reached():
                break
        else:
            if epoch and not counter.epoch_steps:
                _ran_dry(meter, epoch, counter.schedule.epochs)
                counter.dry = True
                return step
            meter.facts.setdefault("steps_per_epoch", counter.epoch_steps)
            if not counter.schedule.partial:  # tune's trials are not an epoch of the loop
                step.scheduling.after_epoch()
    if counter.epoch_steps:
        mean = counter.running / counter.epoch_steps
        _end_epoch(meter, mean, counter.done, evaluate, step)
    return step


def _last_step(run: Prepared, step: Step, done: int, accumulation_steps: int) -> None:
    """After the last batch: the optimizer step of a run that ended part-way through an
    accumulation (its gradients synchronised first under DDP).

    Raises:
        ValueError: the loader yielded no batch.
    """
    if done == 0:
        raise ValueError("the loader yielded no batch: nothing to train on")
    if done % accumulation_steps:
        if run.wrapping is not None and run.group is not None:  # ddp: ran under no_sync()
            parallel.sync_gradients(run.model, run.group)
        step.optimizer_step()


def _interrupted(meter: Meter, run: Prepared, done: int) -> None:
    """A KeyboardInterrupt ended the run after `done` steps: the report is partial."""
    meter.interrupted = True
    where = f"rank {run.group.rank}: " if run.group is not None else ""
    _log.warning("accelkit: %sinterrupted after %d steps; returning a partial report", where, done)


def _end_epoch(
    meter: Meter,
    mean_loss: Any,
    done: int,
    evaluate: Callable[[Step], float | None] | None,
    step: Step,
) -> None:
    """The epoch's end, which is not training: its mean loss (one read, after the pause's
    synchronisation) and the evaluation."""
    meter.recorder.pause(OTHER)
    meter.record_loss(mean_loss.item())
    if not math.isfinite(meter.losses[-1]):
        meter.facts.setdefault("first_nonfinite_loss_step", done)
    if evaluate is not None:
        with meter.phase(EVALUATION):
            loss = evaluate(step)
        if loss is not None:
            meter.recorder.eval_losses.append(loss)


def _ran_dry(meter: Meter, trained: int, asked: int) -> None:
    """The loader yielded nothing in epoch `trained` + 1: it was an iterator spent by the
    epochs before, so the run ends with the epochs it trained, saying so."""
    why = (
        f"the loader yielded no batch in epoch {trained + 1} of {asked}: a one-shot "
        f"iterator or generator, spent after {trained} epoch(s); pass a loader that can "
        "be iterated again (a DataLoader, a list) to train every epoch"
    )
    meter.epochs = trained
    meter.note("epochs", why)
    _log.warning("accelkit.torch.fit: %s", why)


def end_progress(meter: Meter) -> None:
    """End the live progress line on a terminal, if one is open (`accelkit.utils.log`).

    Example:
        >>> from accelkit.torch.measuring.meter import Meter
        >>> meter = Meter()
        >>> end_progress(meter)  # after the meter is closed, before the report prints
    """
    log.end_progress_line()


def _no_sync(model: Any, skip: bool) -> Any:
    return model.no_sync() if skip else contextlib.nullcontext()


def _watch_loss(
    meter: Meter, running: Any, then: Callable[[float, int], None] | None
) -> Callable[[float, int], None]:
    """At each window boundary, where the device is synchronised anyway, note the first
    non-finite running loss: a NaN stays in the epoch's sum, so one look per window finds
    it without a per-step `.item()`."""

    def on_window(step_s: float, step: int) -> None:
        if "first_nonfinite_loss_step" not in meter.facts and not bool(running.isfinite()):
            meter.facts["first_nonfinite_loss_step"] = step
        if then is not None:
            then(step_s, step)

    return on_window


def _length(loader: Any, schedule: Schedule) -> int | None:
    """The run's length in steps where it is known: ``steps``, or ``len(loader)`` x epochs,
    whichever ends it first; None for a loader without a length (an iterable dataset)."""
    try:
        per_epoch = len(loader)
    except Exception:  # noqa: BLE001 - a generator, an IterableDataset's loader: no length
        per_epoch = 0
    known = [n for n in (schedule.steps, per_epoch * schedule.epochs) if n and n > 0]
    return min(known) if known else None


def _progress_printer(
    meter: Meter, total: int | None, epoch_loss: Callable[[], float | None]
) -> Callable[[float, int], None]:
    """The live progress line, an INFO record at window boundaries: redrawn in place on
    a terminal by accelkit's default handler (fitted to its width there), else one record
    every 10 s. With the run's length (`total` steps) known, it says step k/N and the time
    left at the last window's pace. The loss is this epoch's mean so far (`epoch_loss`,
    read only when a line is shown, at a window boundary where the meter has waited for
    the device already), else the last finished epoch's."""
    interactive = log.live_terminal()
    started = time.perf_counter()
    last = [0.0]

    def show(step_s: float, step: int) -> None:
        now = time.perf_counter()
        if not interactive and now - last[0] < 10.0:  # a log file gets a line every 10 s
            return
        last[0] = now
        rate = (meter.last_batch_size or 0) / step_s if step_s else 0.0
        loss = epoch_loss()
        if loss is None and meter.losses:
            loss = meter.losses[-1]
        progress = log.Progress(step, total, rate, step_s, now - started, loss)
        _log.info("%s", progress, extra={log.PROGRESS: progress})

    return show
