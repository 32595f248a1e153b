"""The third part of `accelkit.torch.fit`: the epochs, measured step by step.

Gradient accumulation (micro-steps under DDP's ``no_sync()``), the optimizer step,
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


@dataclasses.dataclass(frozen=True)
class Schedule:
    """How long to train and how often to step the optimizer; checked when built.

    Attributes:
        epochs: passes over the loader.
        steps: stop after this many steps in all (None: every epoch to the end).
        accumulation_steps: batches per optimizer step.

    Example:
        >>> Schedule(epochs=0)
        Traceback (most recent call last):
        ValueError: epochs=0 must be a whole number >= 1
    """

    epochs: int = 1
    steps: int | None = None
    accumulation_steps: int = 1

    def __post_init__(self) -> None:
        arguments.whole("epochs", self.epochs, 1)
        arguments.whole("steps", self.steps, 1, none="whole epochs")
        arguments.whole("accumulation_steps", self.accumulation_steps, 1)


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
    model, loader, device, layout = run.model, run.loader, run.device, run.layout
    ddp = run.group is not None
    steps, accumulation_steps = schedule.steps, schedule.accumulation_steps
    measure = meter.step
    done = epoch_steps = 0
    running = torch.zeros((), device=device)

    def epoch_loss() -> float | None:  # read at window boundaries, where the device waits
        return float(running) / epoch_steps if epoch_steps else None

    printer = _progress_printer(meter, _length(loader, schedule), epoch_loss)
    meter.on_window = _watch_loss(meter, running, printer if progress else None)

    def micro_step(batch: Any, step: Step, stepping: bool) -> Any:
        # Micro-steps that do not step the optimizer skip DDP's all-reduce;
        # the gradients are summed locally and reduced on the stepping one.
        # The step's own wrapper: tune may train through a re-wrapped one.
        with _no_sync(step.model if step.model is not None else model, ddp and not stepping):
            loss = step.forward_loss(batch)
            step.scaler.scale(loss / accumulation_steps).backward()
        return loss

    def train_one(batch: Any, step: Step, again: bool = False) -> Any:
        nonlocal done, epoch_steps
        if again:  # counted already, in the unit of a trial that failed: its gradients only
            return micro_step(batch, step, stepping=False)
        if done == 0 and count_flops:
            meter.set_flops(step.count_flops(batch))
        stepping = (done + 1) % accumulation_steps == 0
        with measure(batch):
            loss = micro_step(batch, step, stepping)
            if stepping:
                step.optimizer_step()
            running.add_(loss.detach().float())
        done += 1  # after the step: a trial step that failed is trained again
        epoch_steps += 1
        return loss

    def limit_reached() -> bool:
        return steps is not None and done >= steps

    try:
        for epoch in range(schedule.epochs):
            epoch_steps = 0
            running.zero_()
            if ddp:
                parallel.set_epoch(loader, epoch)
            batches = (to_device(batch, device, layout) for batch in loader)
            if tuner is not None and epoch == 0:
                step = tuner.run(batches, train_one, limit_reached, on_step=_warmup_held(meter))
            if not limit_reached():
                for batch in batches:
                    train_one(batch, step)
                    if limit_reached():
                        break
                else:
                    if epoch and not epoch_steps:
                        _ran_dry(meter, epoch, schedule.epochs)
                        break
                    meter.facts.setdefault("steps_per_epoch", epoch_steps)
            if epoch_steps:
                _end_epoch(meter, running / epoch_steps, done, evaluate, step)
            if limit_reached():
                break
        _last_step(run, step, done, accumulation_steps)
    except KeyboardInterrupt:
        _interrupted(meter, run, done)
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
        if run.group is not None:  # ddp: the last micro-steps ran under no_sync()
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


def _warmup_held(meter: Meter) -> Callable[[], None]:
    """Before each trial step: keep the meter's warm-up open until `warmup` steps after
    the trials, so steady-state figures are those of the step the run keeps."""
    clock = meter.clock
    after = max(clock.warmup, 1)  # 0 would never open the steady state once passed

    def hold() -> None:
        clock.warmup = max(clock.warmup, clock.steps + 1 + after)

    return hold


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
