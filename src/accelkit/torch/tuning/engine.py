"""tune's one trial engine: the run's own steps, told to it one batch at a time by a door.

Every door drives the same `Engine`: the fit and `accelkit.torch.tune` push each batch of
their own loop (`accelkit.torch.tuning.tuner`), the Lightning and Hugging Face callbacks
each batch their trainer trains (`accelkit.torch.tuning.in_trainer`). A door tells the
engine where a batch begins (`Engine.begin`), shows it the batch before the forward pass
(`Engine.batch`: a candidate's first is checked against the eager step there), and says
when it has trained (`Engine.end`); a door that catches its step's errors (the fit) hands
a candidate's error over (`Engine.failed`). The engine switches candidates between
steps, in the order of `accelkit.torch.tuning.registry.LEVERS`, and times them as
`accelkit.torch.tuning.trials` says: the baseline's units, then for each later candidate
its warm-up units and its paired rounds against the best so far.

What differs between doors is in a `Door`: how it compiles its code, how it checks a
candidate against the eager step, its DDP levers, the words for the end of its data.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from accelkit.profiling.levers import Settings
from accelkit.profiling.tuning import Trial, TuneResult
from accelkit.torch.tuning import graphs, trials
from accelkit.torch.tuning import trial_guards as guards
from accelkit.torch.tuning.candidate import Candidate, Skipped

_log = logging.getLogger("accelkit")

# Graphs a compiled candidate may compile during its timed steps: one automatic-dynamic
# recompile (a batch index or a shape seen changing once) is normal; more means the step
# recompiles as it goes.
RECOMPILES_ALLOWED = 1


class Door(Protocol):
    """What the engine needs of the loop that drives it.

    Attributes:
        module, optimizer, device: what trains (`optimizer` None: not one to switch).
        unit: batches per optimizer step: the unit that is timed.
        planned: the run's length in batches (None: unknown).
        compile_fixed: why compile is not a candidate (the script's or the plan's
            choice), or None.
        under_ddp: the gradients are all-reduced by DistributedDataParallel.
        ended: the words for the end of the door's batches (``"data"``, ``"training"``).
    """

    module: Any
    optimizer: Any
    device: Any
    unit: int
    planned: int | None
    compile_fixed: str | None
    under_ddp: bool
    ended: str

    def decide(self, value: Any) -> Any:
        """Rank 0's `value` on every rank (the value itself when training alone)."""

    def on_step(self) -> None:
        """Before each trial batch (the meter keeps its warm-up open)."""

    def compilers(self) -> tuple[list[tuple[str | None, Callable[[str | None], Any]]], str | None]:
        """The code the door compiles, in the order tried (``("training_step", make)``,
        ``("forward", make)``; the fit's one kind, its forward and loss, is None), each
        ``make(mode) -> Switch`` (``on()``, ``off()``) compiled in torch.compile's `mode`
        from the uncompiled code; and why there is none, where the list is empty."""

    def ddp_levers(self) -> Iterable[Any]:
        """The DDP levers (`accelkit.torch.tuning.levers.Lever`) of a run the door
        wrapped in DDP; none elsewhere."""

    def step_switch(self, lever: Any) -> Candidate | Skipped:
        """A DDP lever as a candidate: its step while on, the best's while off."""

    def check(self, candidate: Candidate, best: Candidate, batch: Any, trial: Trial) -> str | None:
        """Check `candidate` on `batch` (its first) against the eager step: why it
        computes something else, or None (a door may check during the step itself and
        raise there, `Engine.failed`). Leaves `candidate` on."""


class Engine:
    """The trials of a run's first steps; `result` holds the record once they end.

    Args:
        door: the loop that drives it (`Door`).
        mode: ``"auto"``, True or False, as the fit's ``tune``.
        levers: ``levers(engine) -> Iterator[Candidate | Skipped]``: the candidates in
            the order tried, each made when its turn comes, on top of the best so far
            (`accelkit.torch.tuning.registry.candidates`).
    """

    def __init__(
        self,
        door: Door,
        *,
        mode: Any,
        levers: Callable[[Engine], Iterator[Candidate | Skipped]],
    ) -> None:
        import torch

        self.torch, self.door = torch, door
        self._mode = trials.check_mode(mode)
        self.trials: list[Trial] = []
        self.best = Candidate(Settings(), name="eager")
        self.trees_owned = False  # every CUDA-graph tree is one the trials recorded
        self._graphs_given_back = False
        self._levers = levers
        self._queue: Iterator[Candidate | Skipped] = iter(())
        self._current: Candidate | None = None
        self._trial: Trial | None = None
        self._times: list[float] = []  # the current candidate's timed units
        self._rivals: list[float] = []  # the best's units in its paired rounds
        self._turns: tuple[str, ...] = ()  # who trains each of its units (trials.turns)
        self._side = trials.CANDIDATE  # who is on now
        self._first: float | None = None
        self._hits = 0  # inductor's cache hits before the candidate's first unit
        self._cached = False  # its first unit took graphs from inductor's cache
        self._batches = self._units = self.steps = 0
        self._idle = 0  # batches to train untimed after a failure, before the next
        self._started_at = self._unit_at = time.perf_counter()
        self._breaks = self._graphs = 0
        self.result: TuneResult | None = None

    def start(self, baseline: Settings) -> None:
        """Decide whether to tune; if so the baseline, with `baseline`'s settings, is on."""
        self.best = Candidate(baseline)
        before = trials.decide_before(self._mode, self.torch, self.door.device, self.door.planned)
        decision = self.door.decide(before)
        if decision != "tuned":
            self.trials.append(Trial(self.best.name, baseline.to_dict(), status="baseline"))
            self._finish(decision)
            return
        self._queue = self._levers(self)
        self._begin_trial(self.best)

    @property
    def active(self) -> bool:
        """True while trials run."""
        return self.result is None

    @property
    def trying(self) -> bool:
        """A candidate's trial is under way (its errors are findings, not the user's)."""
        return self.active and not self._idle and self._current is not self.best

    @property
    def on_now(self) -> Candidate:
        """The candidate whose code trains now: the one under trial, or the best so far (in
        its units of the paired rounds, after a failure, after the trials)."""
        if self.trying and self._side == trials.CANDIDATE:
            assert self._current is not None  # else not trying
            return self._current
        return self.best

    @property
    def unit_left(self) -> int:
        """The batches of the unit under way not yet ended, the one training now included."""
        return self.door.unit - self._batches % self.door.unit

    # -- the loop --------------------------------------------------------------------

    def begin(self) -> None:
        """A training batch begins (before its forward pass)."""
        if not self.active:
            return
        self.door.on_step()
        if not self._idle and self._batches % self.door.unit == 0:
            self._sync()
            self._unit_at = time.perf_counter()
            if self._units == 0:
                self._breaks = guards.graph_breaks(self.torch)
                self._hits = guards.inductor_cache_hits(self.torch)

    def batch(self, batch: Any) -> None:
        """The batch about to train (a checked candidate's first is checked on it)."""
        current = self._current
        if current is None or not current.checked or not self.active or self._idle:
            return
        current.checked = False  # one check per candidate
        assert self._trial is not None
        if (why := self.door.check(current, self.best, batch, self._trial)) is not None:
            self._drop(why, idle=self.door.unit)  # this unit trains with the best so far

    def end(self) -> None:
        """The batch's backward pass and optimizer step (if any) are done."""
        if not self.active:
            return
        self.steps += 1
        if self._idle:
            self._idle -= 1
            if not self._idle:
                self._next()
            return
        self._batches += 1
        if self._batches % self.door.unit:
            return
        self._sync()
        seconds = time.perf_counter() - self._unit_at
        trial, turn = self._trial, self._turns[self._units]  # who trained this unit
        self._units += 1
        if self._units == 1:
            self._first = seconds
            self._cached = guards.inductor_cache_hits(self.torch) > self._hits
            self._storm()
            if self._trial is not trial:  # dropped: the next candidate is on
                return
        elif self._units > trials.WARMUP_UNITS:
            (self._times if turn == trials.CANDIDATE else self._rivals).append(seconds)
        if self._units == trials.WARMUP_UNITS:
            self._graphs = _graphs_compiled()
        if self._units == len(self._turns):
            self._close()
        else:
            self._take_turn(self._turns[self._units])

    def failed(self, error: BaseException, *, left: int) -> None:
        """The candidate under trial raised in a step of its own (or of the best's, in its
        paired rounds): dropped, the best on again; the next candidate starts after `left`
        more batches (the failed one, trained again by the door, and the rest of its unit)."""
        trial = self._trial
        if trial is not None and trial.check is not None and not trial.check.compared:
            trial.check = None  # it failed before its first comparison
        self._drop(guards.why(error), idle=left)

    def stop(self) -> None:
        """The door's batches ended during the trials: the best so far stays on, and the
        record says where they stopped."""
        if not self.active:
            return
        trial, current = self._trial, self._current
        if trial is not None and trial.status == "skipped":  # under way: not judged
            trial.why = f"the {self.door.ended} ended during this candidate's steps"
            trial.steps = self._units * self.door.unit + self._batches % self.door.unit
        if current is not None and current is not self.best:
            current.off()
            self.best.on()
        if self.trials[0].status != "baseline":
            self._finish(f"not tuned: the {self.door.ended} ended during the baseline's steps")
            return
        self._finish("tuned")

    def undo(self) -> None:
        """The training is over (or failed): the trials stop if under way, and the kept
        candidate goes off unless it `stays`."""
        self.stop()
        if not self.best.stays:
            self.best.off()

    # -- candidates ------------------------------------------------------------------

    def skipped(self, name: str, why: str) -> None:
        self.trials.append(Trial(name, {}, status="skipped", why=why))

    def best_trial(self) -> Trial:
        """The trial of the best so far (the baseline or the last chosen)."""
        return trials.best_so_far(self.trials)

    def _begin_trial(self, candidate: Candidate) -> None:
        self._current = candidate
        self._trial = Trial(candidate.name, candidate.settings.to_dict())
        self.trials.append(self._trial)
        self._times, self._rivals, self._first, self._units = [], [], None, 0
        self._turns = trials.turns(baseline=candidate is self.best)
        self._side = trials.CANDIDATE
        self._batches = 0

    def _next(self) -> None:
        for found in self._queue:
            if isinstance(found, Skipped):
                self._record(found)
                continue
            try:
                found.on()
            except Exception as error:  # noqa: BLE001 - a candidate that cannot start is a finding
                self._record(Skipped(found.name, guards.why(error), found.settings, failed=True))
                continue
            self._begin_trial(found)
            return
        self._finish("tuned")

    def _record(self, skipped: Skipped) -> None:
        settings = skipped.settings.to_dict() if skipped.settings is not None else {}
        status = "failed" if skipped.failed else "skipped"
        self.trials.append(Trial(skipped.name, settings, status=status, why=skipped.why))

    def _take_turn(self, turn: str) -> None:
        """Before the next unit of the paired rounds: the current candidate off and the
        best so far on for the best's unit, or the candidate on again for its own."""
        current = self._current
        if turn == self._side or current is None:
            return
        try:
            if turn == trials.BEST:
                current.off()
                self.best.on()
            else:
                current.on()
        except Exception as error:  # noqa: BLE001 - a switch that fails drops its candidate
            self._drop(guards.why(error))
            return
        self._side = turn

    def _close(self) -> None:
        """The current candidate's units are done: judge it, go on to the next."""
        trial, candidate = self._trial, self._current
        assert trial is not None and candidate is not None
        trial.step_seconds = statistics.median(self._times)
        trial.spread = [min(self._times), max(self._times)]
        trial.steps = self._units * self.door.unit
        if candidate.settings.compile and self._first:  # the first unit compiled
            trial.compile_seconds = round(max(self._first - trial.step_seconds, 0.0), 3)
            trial.compile_cached = self._cached
        if candidate is self.best:  # the baseline
            trial.status = "baseline"
            per_batch = trial.step_seconds / self.door.unit
            after = trials.decide_after(self._mode, per_batch, self.door.planned)
            if (decision := self.door.decide(after)) != "tuned":
                self._finish(decision)
                return
        else:
            trials.pair(trial, self.best_trial().name, self._times, self._rivals)
            # One pair the other way: the rounds again, as rank 0 says on every rank.
            if self.door.decide(trials.more_rounds(trial)):
                self._turns += trials.ROUNDS
                self._take_turn(self._turns[self._units])
                return
            why = self._recompiled(candidate) or candidate.verify()
            if why is not None:
                self._drop(why)  # and on to the next
                return
            self._judge(trial, candidate)
        self._next()

    def _judge(self, trial: Trial, candidate: Candidate) -> None:
        """Rank 0's verdict holds on every rank (one `decide` per candidate on each)."""
        best = self.best_trial()
        faster = trials.clearly_faster(trial, best)
        if self.door.decide("chosen" if faster else "slower") == "chosen":
            trials.overtake(trial, best)
            self.best = candidate
            return
        trial.status = "slower"
        trial.why = trials.why_not(trial, best)
        candidate.off()
        self.best.on()
        self._give_back_graphs()

    def _drop(self, why: str, *, idle: int = 0) -> None:
        """The current candidate failed: off, and the best back on. The next one starts
        after `idle` more batches (the rest of the unit under way), or now."""
        assert self._trial is not None and self._current is not None
        self._trial.status, self._trial.why = "failed", why
        self._trial.steps = self._units * self.door.unit + (1 if idle else 0)
        self._current.off()
        self.best.on()
        self._give_back_graphs()
        self._idle = idle
        if not idle:
            self._next()

    def _recompiled(self, candidate: Candidate) -> str | None:
        if not candidate.settings.compile:
            return None
        compiled = _graphs_compiled() - self._graphs
        if compiled <= RECOMPILES_ALLOWED:
            return None
        return (
            f"recompiles as it trains: {compiled} graphs compiled in its "
            f"{self._units - trials.WARMUP_UNITS} timed steps (a guard on a value that "
            "changes every step)"
        )

    def _storm(self) -> None:
        if self._current is None or not self._current.settings.compile:
            return
        storm = guards.graph_breaks(self.torch) - self._breaks
        if storm > trials.GRAPH_BREAK_STORM:
            self._drop(f"graph break storm: {storm} breaks")

    def _give_back_graphs(self) -> None:
        """The memory pool of CUDA graphs the trials recorded and the best so far does not
        replay goes back to the GPU as soon as their candidate is dropped, before the best
        trains again: a Llama-3.2-1B's graphs (B8 x 2048) ran out of an H100's memory in
        their trial, and their pool's 37 GiB, held until the trials' end, left the best
        none for the batch it trained again; the run failed (docs/benchmarks.md)."""
        if self._graphs_given_back or not self.trees_owned:
            return
        if graphs.left_behind(self.trials, self.best.settings.to_dict()):
            graphs.release(self.torch, self.door.device)
            self._graphs_given_back = True

    # -- the end ---------------------------------------------------------------------

    def _finish(self, decision: str) -> None:
        kept = self.best.settings
        self._give_back_graphs()
        self.result = TuneResult(
            decision=decision,
            trials=tuple(self.trials),
            compile=kept.compile,
            optimizer=kept.optimizer,
            seconds=time.perf_counter() - self._started_at,
            steps=self.steps,
            ddp=dict(kept.ddp),
            attention=kept.attention,
            float8=kept.float8,
        )
        # Said at INFO once trials ran; a decision taken without one is only a debug line.
        level = logging.INFO if self.steps else logging.DEBUG
        _log.log(level, "tune: %s", trials.summary(self.result))

    def _sync(self) -> None:
        if self.door.device.type == "cuda":
            self.torch.cuda.synchronize(self.door.device)


def _graphs_compiled() -> int:
    """Graphs dynamo has compiled in this process (0 where its counter is not there)."""
    try:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])
    except Exception:  # noqa: BLE001 - a private counter: no count, no recompiles seen
        return 0
