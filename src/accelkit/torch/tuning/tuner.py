"""`Tuner` and `tune`: measure the fit's options on the user's own model and keep the fastest.

`Tuner.run` trains the first batches of a run through each candidate in turn and
returns the step the run keeps: the baseline's units, then for each later candidate its
warm-up units and its paired rounds, where its step and the best so far's alternate unit
by unit (`trials.turns`) and the candidate's in-place switches (the optimizer's
implementation, SDPA, bf16 gradients) are turned off for the best's units and on again
for its own; a compiled or re-wrapped step is just another `Step` to train with.
`accelkit.torch.tuning.trials` describes the protocol and holds its limits and its result.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

from accelkit.profiling.tuning import Check, default_compile
from accelkit.torch.training.step import Step, TrainOne
from accelkit.torch.tuning import attention, graphs, levers, optimizers, reference, trials
from accelkit.torch.tuning import trial_guards as guards
from accelkit.torch.tuning.trials import Trial, TuneResult, check_mode
from accelkit.utils.imports import require

_log = logging.getLogger("accelkit")


class Tuner:
    """Runs the trials inside a training loop; `run` returns the step to keep.

    Args:
        base: the step the plan's settings give (eager unless compile was fixed on).
        module: the module trained (the eager reference of the compile check runs on
            it, its gradients, buffers and random number generators put back after).
        optimizer: the optimizer `base` steps (switched in place for the fused trial).
        device: where the model trains (synchronised around timed steps).
        mode: ``"auto"``, True or False (see `accelkit.torch.fit`).
        compile_fixed: the script's or plan's compile choice (None: left to tuning).
        planned_steps: the run's length in steps, for ``"auto"`` (None: unknown).
        accumulation_steps: batches per optimizer step: the unit that is timed.
        decide: ``decide(value) -> value``: rank 0's value on every rank (identity
            when training alone).
        levers: the DDP candidates (`accelkit.torch.tuning.levers.Levers`), tried after the
            optimizer and before ``torch.compile``; None without DDP.

    Example:
        >>> import accelkit
        >>> import torch
        >>> from accelkit.torch.training.prepare import prepare
        >>> from accelkit.torch.training.step import make_step
        >>> model, plan = torch.nn.Linear(16, 4), accelkit.plan_for(None)
        >>> run = prepare(model, [], plan, device="cpu", channels_last=None, group=None)
        >>> opt = torch.optim.AdamW(model.parameters())
        >>> step = make_step(run, plan, torch.nn.CrossEntropyLoss(), opt, compile=False,
        ...                  max_grad_norm=None)
        >>> def train_one(batch, step):   # the loop's step: returns the loss
        ...     loss = step.forward_loss(batch)
        ...     loss.backward()
        ...     step.optimizer_step()
        ...     return loss
        >>> batches = iter([(torch.randn(32, 16), torch.randint(0, 4, (32,)))] * 40)
        >>> tuner = Tuner(step, module=model, optimizer=opt, device=run.device, mode=True,
        ...               compile_fixed=False, planned_steps=1000, accumulation_steps=1)
        >>> step = tuner.run(batches, train_one, lambda: False)
        >>> [trial.name for trial in tuner.result.trials]  # compile_fixed: no compile tried
        ['eager', 'eager+fused', 'compile', 'max-autotune']
        >>> tuner.result.chosen.name  # doctest: +SKIP
        'eager+fused'
    """

    def __init__(
        self,
        base: Step,
        *,
        module: Any,
        optimizer: Any,
        device: Any,
        mode: Any,
        compile_fixed: bool | None,
        planned_steps: int | None,
        accumulation_steps: int,
        decide: Callable[[Any], Any] = lambda value: value,
        levers: Any = None,
    ) -> None:
        self._torch = require("torch")
        self._base = base
        self._module = module
        self._optimizer = optimizer
        self._device = device
        self._mode = check_mode(mode)
        self._compile_fixed = compile_fixed
        self._planned = planned_steps
        self._unit = accumulation_steps
        self._decide = decide
        self._levers = levers
        self._sdpa: attention.Attention | None = None  # on: kept, or under trial
        self._trying: attention.Attention | None = None  # under trial: off for the reference
        self._on_step: Callable[[], None] = lambda: None
        self._trials: list[Trial] = []
        self._trees_owned = False  # every CUDA-graph tree is one the trials recorded
        self._steps = 0
        self._ended = False
        self.result: TuneResult | None = None

    # -- the trials ------------------------------------------------------------------

    def run(
        self,
        batches: Iterator[Any],
        train_one: TrainOne,
        limit_reached: Callable[[], bool],
        on_step: Callable[[], None] = lambda: None,
    ) -> Step:
        """Train the trial steps from `batches` with `train_one(batch, step)` (which
        returns the step's loss tensor) until the trials end or `limit_reached()`;
        `on_step()` is called before each. Returns the step to train the rest with."""
        started = time.perf_counter()
        self._batches, self._train_one, self._limit = batches, train_one, limit_reached
        self._on_step = on_step
        variant, no_variant = optimizers.faster_variant(self._optimizer)
        optimizer_name = "default"
        best = self._base
        decision = self._decide(self._before())
        if decision != "tuned":  # decided without a measurement: no trial at all
            self._trials.append(
                Trial(
                    self._name(best, "default"),
                    {"compile": best.compiled, "optimizer": "default"},
                    status="baseline",
                )
            )
            return self._finish(decision, best, optimizer_name, started)
        baseline = self._measure(best, self._name(best, "default"))
        baseline.status = "baseline"
        decision = self._decide(self._after(baseline))
        if decision == "tuned":
            if variant is None:
                self._skipped("optimizer", no_variant)
            else:
                optimizers.use(self._optimizer, variant, True)
                trial = self._measure(
                    best,
                    self._name(best, variant.name),
                    best=best,
                    undo=lambda: optimizers.use(self._optimizer, variant, False),
                    redo=lambda: optimizers.use(self._optimizer, variant, True),
                )
                if self._judge(trial, self._best_trial()):
                    optimizer_name = variant.name
                elif trial.status != "failed":  # a failed one was undone already
                    optimizers.use(self._optimizer, variant, False)
            for lever in self._levers.candidates() if self._levers is not None else ():
                best = self._lever(lever, best, optimizer_name)
            self._attention(best, optimizer_name)
            compiled = self._compiled(best, optimizer_name)
            best = self._autotuned(best, compiled, optimizer_name)
        return self._finish(decision, best, optimizer_name, started)

    def _compiled(self, best: Step, optimizer: str) -> Step:
        """``torch.compile`` of the forward pass and loss, then its CUDA graphs, each on
        top of the best so far; the step to go on with."""
        if self._compile_fixed is not None or best.compiled:
            self._skipped("compile", f"compile={best.compiled} was set by the script or the plan")
            return best
        eager = best
        compiled = dataclasses.replace(
            best, forward_loss=self._torch.compile(best.forward_loss), compiled=True
        )
        trial = self._measure(
            compiled, self._name(compiled, optimizer), best=best, undo=_no, check=True
        )
        if self._judge(trial, self._best_trial()):
            best = compiled
        ddp = graphs.under_ddp(eager)
        why = graphs.unsupported(self._torch, self._device, ddp=ddp, compiled=trial)
        if why:
            self._skipped("cudagraphs", why)
            return best
        self._trees_owned = not graphs.trees(self._torch, self._device)
        graphed = graphs.step(self._torch, eager)
        name = self._name(graphed, optimizer).replace("compile", "cudagraphs", 1)
        trial = self._measure(graphed, name, best=best, undo=_no, check=True, cudagraphs=True)
        return graphed if self._judge(trial, self._best_trial()) else best

    def _autotuned(self, eager: Step, best: Step, optimizer: str) -> Step:
        """``torch.compile(mode="max-autotune")`` of `eager`'s forward pass and loss (with
        its CUDA graphs where those were kept), when the default compile was kept and
        the run left is long enough to pay for the autotuning; the step to go on with."""
        kept = trials.best_so_far(self._trials)
        if self._compile_fixed is not None or eager.compiled:
            self._skipped("max-autotune", "compile was set by the script or the plan")
            return best
        why = trials.autotune_unsupported(self._device, kept) or trials.autotune_unpaid(
            self._planned, self._steps, kept, self._unit, default_compile(self._trials)
        )
        if why:
            self._skipped("max-autotune", why)
            return best
        graphed = bool(kept.settings.get("cudagraphs"))
        mode = graphs.AUTOTUNE if graphed else graphs.AUTOTUNE_NO_GRAPHS
        if graphed:
            tuned = graphs.step(self._torch, eager, mode=mode)
        else:
            forward_loss = self._torch.compile(eager.forward_loss, mode=mode)
            tuned = dataclasses.replace(eager, forward_loss=forward_loss, compiled=True)
        name = self._name(tuned, optimizer).replace("compile", "max-autotune", 1)
        trial = self._measure(
            tuned, name, best=best, undo=_no, check=True, cudagraphs=graphed, mode=mode
        )
        return tuned if self._judge(trial, self._best_trial()) else best

    def _attention(self, best: Step, optimizer: str) -> None:
        """SDPA attention for the run's eager-attention transformers models, switched in
        place on top of the best so far (`accelkit.torch.tuning.attention`), kept on when
        clearly faster. Before compile, which then compiles the attention kept. Its trial
        costs one candidate's steps (real training steps, at worst at the eager speed)
        and the check's eager pass, no compilation: little against what the eager
        attention's score matrix costs a GPU step at each layer."""
        switch, why = attention.candidate(self._module)
        if switch is None:
            if why:
                self._skipped("sdpa", why)
            return
        try:
            switch.on()
        except Exception as error:  # noqa: BLE001 - a model transformers will not switch
            self._trials.append(Trial("sdpa", {}, status="failed", why=guards.why(error)))
            return
        self._sdpa = self._trying = switch
        try:
            trial = self._measure(
                best,
                self._name(best, optimizer),
                best=best,
                undo=switch.off,
                redo=switch.on,
                check=True,
            )
        finally:
            self._trying = None
        if not self._judge(trial, self._best_trial()):
            switch.off()  # idempotent: a failed one was switched off already
            self._sdpa = None

    def _skipped(self, name: str, why: str) -> None:
        self._trials.append(Trial(name, {}, status="skipped", why=why))

    def _finish(self, decision: str, best: Step, optimizer_name: str, started: float) -> Step:
        if self._trees_owned:  # CUDA graphs were tried, so a baseline was measured
            kept = trials.best_so_far(self._trials).settings
            if graphs.left_behind(self._trials, kept):
                graphs.release(self._torch, self._device)
        self.result = TuneResult(
            decision=decision,
            trials=tuple(self._trials),
            compile=best.compiled,
            optimizer=optimizer_name,
            seconds=time.perf_counter() - started,
            steps=self._steps,
            ddp=levers.trial_settings(best.ddp),
            attention=attention.SDPA if self._sdpa is not None else None,
        )
        # Said at INFO once trials ran; a decision taken without one is only a debug line.
        level = logging.INFO if self._steps else logging.DEBUG
        _log.log(level, "tune: %s", trials.summary(self.result))
        return best

    def _name(self, step: Step, optimizer: str) -> str:
        extra = "" if optimizer == "default" else f"+{optimizer}"
        extra += levers.label(step.ddp) + ("+sdpa" if self._sdpa is not None else "")
        return ("compile" if step.compiled else "eager") + extra

    def _lever(self, lever: Any, best: Step, optimizer: str) -> Step:
        """Try one DDP lever on top of `best` (every rank alike); the step to go on with."""
        if lever.skip:
            self._skipped(lever.name, lever.skip)
            return best
        try:
            step = lever.apply(best)
        except Exception as error:  # noqa: BLE001 - a wrapper DDP refuses is a finding
            self._trials.append(Trial(lever.name, {}, status="failed", why=guards.why(error)))
            return best
        # A lever on the same wrapper (bf16 gradients: its hook's compression) is switched
        # on again for the candidate's units by applying it again; one that re-wrapped the
        # module is a step of its own, on only while that step trains.
        in_place = step.model is best.model
        trial = self._measure(
            step,
            self._name(step, optimizer),
            best=best,
            undo=lever.undo,
            redo=(lambda: _ignore(lever.apply(best))) if in_place else _no,
        )
        if trial.status == "measured" and (why := lever.verify()):
            trial.status, trial.why = "failed", why
        if self._judge(trial, self._best_trial()):
            return step
        lever.undo()  # idempotent: _measure may have undone a candidate that raised
        return best

    def _before(self) -> str:
        """ "tuned", or why not, where no measurement is needed to tell."""
        return trials.decide_before(self._mode, self._torch, self._device, self._planned)

    def _after(self, baseline: Trial) -> str:
        """ "tuned", or why not, once the baseline's step time is known (``"auto"``)."""
        if self._ended or baseline.step_seconds is None:
            return "not tuned: the data ended during the baseline's steps"
        return trials.decide_after(self._mode, baseline.step_seconds / self._unit, self._planned)

    def _best_trial(self) -> Trial:
        """The best before the trial just measured (the last one recorded)."""
        return trials.best_so_far(self._trials[:-1])

    def _judge(self, trial: Trial, best: Trial) -> bool:
        """Mark `trial` against the best so far; True when it becomes the best. Rank 0's
        verdict holds on every rank (one `decide` per candidate on each)."""
        if trial.status != "measured":
            local = trial.status
        elif trials.clearly_faster(trial, best):
            local = "chosen"
        else:
            local = "slower"
        verdict = self._decide(local)
        if verdict == "chosen":
            trials.overtake(trial, best)
            return True
        if trial.status == "measured":
            trial.status = "slower" if verdict == "slower" else verdict
            trial.why = trial.why or trials.why_not(trial, best)
        return False

    # -- one candidate ---------------------------------------------------------------

    def _measure(
        self,
        step: Step,
        name: str,
        *,
        best: Step | None = None,
        undo: Callable[[], None] | None = None,
        redo: Callable[[], None] = lambda: None,
        check: bool = False,
        cudagraphs: bool = False,
        mode: str | None = None,
    ) -> Trial:
        """Train `step` for a candidate's units (`trials.turns`), and time them. `best`:
        the best so far's step, trained in turn with `step` in the candidate's paired
        rounds (None: this is the baseline, whose errors are the user's); `undo` turns the
        candidate's in-place switches off, for the best's units and after a failure,
        `redo` on again; `mode` is torch.compile's where not its default."""
        optimizer = next((o for o in ("fused", "foreach") if f"+{o}" in name), "default")
        ddp = levers.trial_settings(step.ddp)
        settings = {"compile": step.compiled, "optimizer": optimizer, **ddp}
        if cudagraphs:
            settings["cudagraphs"] = True
        if mode is not None:
            settings["compile_mode"] = mode
        if self._sdpa is not None:
            settings["attention"] = attention.SDPA
        trial = Trial(name=name, settings=settings)
        self._trials.append(trial)
        if self._ended:
            trial.why = "the data ended before this candidate's turn"
            return trial
        before = self._steps
        rival = None if best is None else _Rival(best, undo or _no, redo)
        try:
            own, bests, first = self._units(step, trial, rival, check)
        finally:
            trial.steps = self._steps - before
            if trial.check is not None and not trial.check.compared:
                trial.check = None  # it failed before its first comparison
        if trial.status == "failed":
            return trial
        if own:
            trial.step_seconds = statistics.median(own)
            trial.spread = [min(own), max(own)]
        if len(own) < 3 or (rival is not None and len(bests) < trials.PAIRS):
            trial.why = f"the data ended after {trial.steps} of its steps"
            return trial
        if rival is not None:
            trials.pair(trial, self._best_trial().name, own, bests)
        trial.status = "measured"
        if step.compiled and first is not None:
            trial.compile_seconds = round(max(first - statistics.median(own), 0.0), 3)
        return trial

    def _units(
        self, step: Step, trial: Trial, rival: _Rival | None, check: bool
    ) -> tuple[list[float], list[float], float | None]:
        """The seconds of the candidate's timed units, of the best's units paired with
        them, and of its first unit; marks `trial` failed on a failure (in the best's
        units too: the switching is the candidate's), the best's settings back on. Leaves
        the candidate on."""
        own: list[float] = []
        bests: list[float] = []
        first: float | None = None
        breaks = guards.graph_breaks(self._torch)
        side = trials.CANDIDATE
        for unit, turn in enumerate(trials.turns(baseline=rival is None)):
            if self._ended:
                break
            if rival is not None and turn != side:
                (rival.undo if turn == trials.BEST else rival.redo)()
                side = turn
            try:
                seconds = self._timed_unit(
                    rival.step if rival is not None and turn == trials.BEST else step,
                    catch=rival is not None,
                    check=trial if check and unit == 0 else None,
                )
            except guards.Failed as failed:
                trial.status, trial.why = "failed", failed.why
                assert rival is not None  # only candidates catch
                rival.undo()
                self._retrain(failed.batches, failed.error)
                return own, bests, first
            if seconds is None:
                break
            if unit == 0:
                first = seconds
                storm = guards.graph_breaks(self._torch) - breaks
                if check and storm > trials.GRAPH_BREAK_STORM:
                    trial.status, trial.why = "failed", f"graph break storm: {storm} breaks"
                    return own, bests, first
            elif unit >= trials.WARMUP_UNITS:
                (own if turn == trials.CANDIDATE else bests).append(seconds)
        if rival is not None and side != trials.CANDIDATE:
            rival.redo()  # cut short in a best's unit: on, as its callers expect
        return own, bests, first

    def _timed_unit(self, step: Step, *, catch: bool, check: Trial | None) -> float | None:
        """One optimizer step (`accumulation_steps` batches), device-synchronised at both
        ends; None when the data or the run's step limit ended it. With `catch`, an error
        is a `guards.Failed` carrying the unit's batches; without, it passes through as it
        is. With `check`, the unit's first batch is checked and the trial gets the figures."""
        taken: list[Any] = []
        self._sync()
        start = time.perf_counter()
        this = step
        for _ in range(self._unit):
            batch = next(self._batches, None)
            if batch is None:
                self._ended = True
                return None
            taken.append(batch)
            if check is not None and len(taken) == 1:  # the whole unit: grads checked later
                try:
                    this = self._checked(step, batch, check)
                except reference.NotCopied as error:  # no copy to check on: not tried
                    raise guards.Failed(error, taken) from error
            self._on_step()
            if not catch:
                self._train_one(batch, this)
            else:
                try:
                    self._train_one(batch, this)
                except Exception as error:  # a candidate's failure is a finding, not the run's end
                    raise guards.Failed(error, taken) from error
            self._steps += 1
            if self._limit():
                self._ended = True
                if len(taken) < self._unit:  # cut short: not a whole optimizer step
                    return None
        self._sync()
        return time.perf_counter() - start

    def _retrain(self, batches: list[Any], error: BaseException) -> None:
        """Train the failed candidate's batches again with the baseline step, from zeroed
        gradients. The user's own error (bad data, a bug in the loss) raises again here.
        All but the last were counted already (the failure came in the last): they give
        their gradients again without being counted twice, so the accumulation stays
        in phase (the optimizer steps where it would have without the trial)."""
        _log.info(
            "tune: a candidate failed (%s); its %d batch(es) train again with the baseline step",
            guards.why(error),
            len(batches),
        )
        self._optimizer.zero_grad(set_to_none=True)
        guards.reset_scaler(self._base.scaler)
        if self._device.type == "cuda":
            self._torch.cuda.empty_cache()
        *counted, failed = batches
        for batch in counted:
            self._train_one(batch, self._base, again=True)
        self._on_step()
        self._train_one(failed, self._base)
        if self._limit():
            self._ended = True

    def _checked(self, step: Step, batch: Any, trial: Trial) -> Step:
        """`step`, checked on `batch` against the baseline's eager step (`reference`); the
        figures compared go to ``trial.check``."""
        torch = self._torch
        params = [p for p in self._module.parameters() if p.requires_grad]
        sample = reference.GradSample(params, torch)
        # The SDPA candidate is checked against the attention it replaces.
        trying = self._trying.off_while() if self._trying else contextlib.nullcontext()
        with trying:
            eager = reference.eager_reference(
                self._eager_step(),
                batch,
                module=self._module,
                params=params,
                sample=sample,
                device=self._device,
                torch=torch,
                average=self._as_reduced,
            )
        trial.check = Check()
        return guards.checked(step, eager, sample, trial.check)

    def _eager_step(self) -> Callable[[Any], Any]:
        """The baseline's forward and backward pass as the loop runs one micro-step, eager,
        on a copy of the module made for each pass (`reference.copy_of`: its parameters
        and buffers shared, its Python state copied), so that a model that keeps state in
        its forward (a counter, a curriculum) runs it on the module only in the run's own
        steps; under DDP no collective runs (every rank computes alike). The loss
        function is called as it is: the check needs its value."""
        base = self._base
        assert base.through is not None  # `make_step` builds every step with one

        def forward_backward(batch: Any) -> Any:
            loss = base.through(reference.copy_of(self._module), False).forward_loss(batch)
            base.scaler.scale(loss / self._unit).backward()
            return loss

        return forward_backward

    def _as_reduced(self, grads: Any) -> Any:
        """The eager gradients as the candidate's first micro-step leaves them: averaged
        over the ranks when that step all-reduces (DDP, no accumulation)."""
        if self._base.model is self._module or self._unit > 1:
            return grads
        distributed = self._torch.distributed
        grads = grads.clone()
        distributed.all_reduce(grads)
        return grads / distributed.get_world_size()

    def _sync(self) -> None:
        if self._device.type == "cuda":
            self._torch.cuda.synchronize(self._device)


@dataclasses.dataclass(frozen=True)
class _Rival:
    """The best so far in a candidate's paired rounds: its `step`, and the candidate's
    in-place switches, turned off for its units (`undo`) and on again after (`redo`)."""

    step: Step
    undo: Callable[[], None]
    redo: Callable[[], None]


def _no() -> None:
    return None


def _ignore(_: Any) -> None:
    return None
