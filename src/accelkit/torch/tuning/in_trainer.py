"""`tune` inside a trainer's own loop: the trials of the Lightning and Hugging Face callbacks.

A trainer runs its steps itself, so the trials cannot draw batches as `Tuner.run` does.
The callback tells `TrainerTrials` where each training batch begins and ends
(`begin`, `end`) and shows it each batch before the forward pass (`batch`); the trials
switch candidates between steps. The candidates, limits and record are the fit's
(`accelkit.torch.tuning.trials`):

1. the trainer as configured (the baseline);
2. the optimizer's fused (or foreach) implementation, switched in place
   (`accelkit.torch.tuning.optimizers`), when the script left that choice to PyTorch;
3. SDPA attention for the Hugging Face models in the module that run eager attention
   (`accelkit.torch.tuning.attention`), checked like compile; a kept one stays on when
   the training ends (``report.tuning`` names it), as after the fit;
4. ``torch.compile`` of the whole training step, forward and loss (``"compile step"``),
   where the door can compile it (the LightningModule's ``training_step``), else, or when
   it fails, of the forward pass (`Compiled`), when neither the script nor the trainer
   compiled the model. The forward-only compile runs only after the whole step failed:
   it compiles part of the same code, so where the whole step was not clearly faster it
   would not pay its compile time either, and a successful step costs no trial more;
5. on a CUDA device without DDP, where that compile ran (kept or not), the same code
   compiled with ``mode="reduce-overhead"``: its CUDA graphs (`accelkit.torch.tuning.graphs`,
   what it returns and logs copied out of the graphs' memory), in the place of the best
   so far, checked like compile;
6. on a CUDA device, where compile was kept and the run left pays for it
   (`trials.autotune_unpaid`), the same code compiled with ``mode="max-autotune"`` (with
   CUDA graphs where those were kept, else ``"max-autotune-no-cudagraphs"``) in its place
   (checked against the eager step).

A unit is one optimizer step (`batches_per_unit` batches), timed with the device
synchronised at both ends. The baseline runs `trials.WARMUP_UNITS` untimed units, then
`trials.BASELINE_UNITS` timed ones; each later candidate its `trials.WARMUP_UNITS`, then
`trials.TIMED_UNITS` in paired rounds with the best so far (`trials.turns`): between two
units the candidate is switched off and the best on (``candidate.off(); best.on()``), or
the candidate on again, so that each of its units has one of the best's next to it, run
under the same load (`trials.pair`, judged by `trials.clearly_faster`). Every trial step
is a real training step of the run.

The compiled candidate is checked before the trainer trains on it: on its first batch,
the eager and the compiled forward and backward pass each run at the same weights
(`check`), compared as the fit compares them (`trial_guards.check_loss`, ``check_grads``),
the gradients, buffers and random number generators put back (`reference.kept`). The
doors run each of those passes on a copy of the module (`reference.copy_of`: its Python
state copied, its parameters and buffers shared), so that the user's step runs on the
module the trainer trains exactly as often as the trainer runs it; the compiled code is
bound to whichever module calls it (`compiled_method`), the copy's included, and the
trainer's step then runs what the check compiled. One
that fails the check, or raises while compiling, is dropped before the trainer's step
runs: nothing trains on it, and that step trains with the best candidate so far. One that
compiles again during its timed steps (more than `RECOMPILES_ALLOWED` graphs: a guard on
a value that changes every step, such as ``self.global_step``) is dropped too.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import statistics
import time
import types
from collections.abc import Callable
from typing import Any

from accelkit.profiling import torch_batches
from accelkit.profiling.tuning import Check, Trial, TuneResult, default_compile
from accelkit.torch.distributed import parallel
from accelkit.torch.tuning import attention, graphs, optimizers, reference, trials
from accelkit.torch.tuning import trial_guards as guards

_log = logging.getLogger("accelkit")

# Graphs a compiled candidate may compile during its timed steps: one automatic-dynamic
# recompile (a batch index or a shape seen changing once) is normal; more means the step
# recompiles as it goes.
RECOMPILES_ALLOWED = 1


class Compiled:
    """``torch.compile`` of `modules`' forward passes, switched on and off in place.

    The compiled forward is set as each module's own ``forward`` attribute, the one
    ``module(...)`` calls: the module's hooks (the callbacks' batch readers) stay outside
    the compiled code, and `off` puts back exactly what was there (a trainer's own
    wrapper, such as Accelerate's autocast of ``forward``). Compiling happens at the first
    call after `on`.

    Example:
        >>> import torch
        >>> layer = torch.nn.Linear(4, 2)
        >>> compiled = Compiled(torch, [layer])
        >>> compiled.on()
        >>> "forward" in vars(layer)
        True
        >>> compiled.off()
        >>> "forward" in vars(layer)
        False
    """

    def __init__(self, torch: Any, modules: list[Any], mode: str | None = None) -> None:
        self._modules = modules
        self._saved = [vars(module).get("forward") for module in modules]
        self._compiled = [_compiled_forward(torch, module, mode) for module in modules]

    def on(self) -> None:
        for module, compiled in zip(self._modules, self._compiled, strict=True):
            module.forward = compiled

    def off(self) -> None:
        for module, saved in zip(self._modules, self._saved, strict=True):
            if saved is None:
                vars(module).pop("forward", None)
            else:
                module.forward = saved


def compiled_method(torch: Any, module: Any, name: str, **options: Any) -> tuple[Any, Any]:
    """``torch.compile`` of `module`'s method `name`: ``(compiled, function)``. `function`
    is the function under the bound method, and `compiled` takes the module as its first
    argument, so that a copy of `module` (the check's, `reference.copy_of`) runs the same
    compiled code on itself and the trainer's step reuses what the check compiled; or
    None where `name` is no method of `module` (a wrapper's plain function, compiled as
    it is). In a mode that captures CUDA graphs the outputs are copied out of the graphs'
    pool (`graphs.replayed`).

    Example:
        >>> import torch
        >>> layer = torch.nn.Linear(4, 2)
        >>> compiled, function = compiled_method(torch, layer, "forward")
        >>> function is torch.nn.Linear.forward
        True
    """
    method = getattr(module, name)
    function = getattr(method, "__func__", None)
    if getattr(method, "__self__", None) is not module:
        function = None
    compiled = torch.compile(method if function is None else function, **options)
    if graphs.captures(options.get("mode")):
        compiled = graphs.replayed(torch, compiled)
    return compiled, function


def bound(call: Callable[..., Any], function: Any, module: Any) -> Any:
    """``call(module, ...)`` as a method of `module`, named and signed as `function`; a
    copy of `module` (`copy.deepcopy`) binds it to itself.

    Example:
        >>> import torch
        >>> layer = torch.nn.Linear(4, 2)
        >>> method = bound(torch.nn.Linear.forward, torch.nn.Linear.forward, layer)
        >>> method.__self__ is layer, method.__name__
        (True, 'forward')
    """

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return call(self, *args, **kwargs)

    return types.MethodType(functools.update_wrapper(method, function), module)


def _compiled_forward(torch: Any, module: Any, mode: str | None) -> Any:
    compiled, function = compiled_method(torch, module, "forward", mode=mode)
    return compiled if function is None else bound(compiled, function, module)


@dataclasses.dataclass
class _Candidate:
    name: str
    settings: dict[str, Any]
    on: Callable[[], None]
    off: Callable[[], None]
    checked: bool = False  # its first batch is checked against the eager step
    stays: bool = False  # stays on when the training ends (`TrainerTrials.undo`)


class TrainerTrials:
    """The trials of a trainer's first steps; `result` holds the record once they end.

    Args:
        module: the module trained (what the check's gradients and buffers belong to).
        optimizer: the torch optimizer the trainer steps (switched in place; None: the
            trainer steps several, or none).
        device: where it trains (synchronised around each timed unit).
        mode: ``"auto"``, True or False, as the fit's ``tune``.
        compile_targets: the modules whose forward pass the compiled candidate compiles;
            empty leaves compile out.
        compile_step: ``compile_step(mode=None) -> switch`` (``on()``, ``off()``): the
            whole training step compiled (in torch.compile's `mode`), tried before
            `compile_targets`, which are tried only if it fails (None: the door has no
            step to compile).
        compile_fixed: why compile is not a candidate (the script or trainer compiled
            already), or None.
        planned_steps: the run's length in batches, for ``"auto"`` (None: unknown).
        batches_per_unit: batches per optimizer step (gradient accumulation).
        forward_backward: ``forward_backward(batch) -> loss``: one batch's forward and
            backward pass as the trainer runs it, through the module's current forward,
            without the optimizer step (the check runs it eager and compiled). A door
            whose step is the user's code runs it on a copy of `module`
            (`reference.copy_of`, made anew for each pass), leaving `module`'s Python
            state to the trainer's own steps.
        decide: rank 0's value on every rank (identity when training alone).
        on_step: called before each trial batch (the meter keeps its warm-up open).

    Example:
        >>> import torch
        >>> model = torch.nn.Linear(8, 2)
        >>> opt = torch.optim.AdamW(model.parameters())
        >>> def forward_backward(batch):
        ...     loss = model(batch).square().mean()
        ...     loss.backward()
        ...     return loss
        >>> tuning = TrainerTrials(model, opt, torch.device("cpu"), mode=True,
        ...     compile_targets=[model], compile_fixed=None, planned_steps=None,
        ...     batches_per_unit=1, forward_backward=forward_backward)
        >>> while tuning.active:              # the trainer's loop, told by the callback
        ...     tuning.begin()
        ...     batch = torch.randn(4, 8)
        ...     tuning.batch(batch)
        ...     _ = forward_backward(batch)
        ...     opt.step()
        ...     opt.zero_grad()
        ...     tuning.end()
        >>> tuning.result.decision, len(tuning.result.trials), tuning.result.steps
        ('tuned', 5, 26)
        >>> [trial.name for trial in tuning.result.trials]  # doctest: +SKIP
        ['eager', 'eager+fused', 'compile+fused', 'cudagraphs', 'max-autotune']
        >>> [trial.why for trial in tuning.result.trials[-2:]]  # candidates of GPU runs
        ['CUDA graphs need a CUDA device', 'max-autotune tunes GPU kernels; this run is on the CPU']
    """

    def __init__(
        self,
        module: Any,
        optimizer: Any,
        device: Any,
        *,
        mode: Any,
        compile_targets: list[Any],
        compile_fixed: str | None,
        compile_step: Callable[..., Any] | None = None,
        planned_steps: int | None,
        batches_per_unit: int,
        forward_backward: Callable[[Any], Any],
        decide: Callable[[Any], Any] = lambda value: value,
        on_step: Callable[[], None] = lambda: None,
    ) -> None:
        import torch

        self._torch, self._module, self._device = torch, module, device
        self._optimizer = optimizer
        self._mode = trials.check_mode(mode)
        self._targets, self._compile_fixed = compile_targets, compile_fixed
        self._compile_step = compile_step
        self._planned = planned_steps
        self._unit = batches_per_unit
        self._forward_backward = forward_backward
        self._decide, self._on_step = decide, on_step
        self._trials: list[Trial] = []
        self._queue: list[Callable[[], _Candidate | None]] = [
            self._fused,
            self._sdpa,
            self._compiled_step,
            self._compiled,
            self._graphed,
            self._autotuned,
        ]
        self._best = _Candidate("eager", {"compile": False, "optimizer": "default"}, _no, _no)
        self._current: _Candidate | None = None
        self._trial: Trial | None = None
        self._times: list[float] = []  # the current candidate's timed units
        self._rivals: list[float] = []  # the best's units in its paired rounds
        self._turns: tuple[str, ...] = ()  # who trains each of its units (trials.turns)
        self._side = trials.CANDIDATE  # who is on now
        self._first: float | None = None
        self._batches = self._units = self._steps = 0
        self._idle = 0  # batches to train untimed after a failed check, before the next
        self._started_at = self._unit_at = time.perf_counter()
        self._breaks = self._graphs = 0
        self._trees_owned = False  # every CUDA-graph tree is one the trials recorded
        self.result: TuneResult | None = None
        self._start()

    @property
    def active(self) -> bool:
        """True while trials run (the callback tells it about each batch)."""
        return self.result is None

    # -- the trainer's loop ----------------------------------------------------------

    def begin(self) -> None:
        """A training batch begins (before its forward pass)."""
        if not self.active:
            return
        self._on_step()
        if not self._idle and self._batches % self._unit == 0:
            self._sync()
            self._unit_at = time.perf_counter()
            if self._units == 0:
                self._breaks = guards.graph_breaks(self._torch)

    def batch(self, batch: Any) -> None:
        """The batch the trainer is about to train on (checks a candidate's first)."""
        current = self._current
        if current is not None and current.checked and self.active and not self._idle:
            current.checked = False  # one check per candidate
            if (why := self._check(current, batch)) is not None:
                self._drop(why, idle=self._unit)  # this batch trains with the best so far

    def end(self) -> None:
        """The batch's backward pass and optimizer step (if any) are done."""
        if not self.active:
            return
        self._steps += 1
        if self._idle:
            self._idle -= 1
            if not self._idle:
                self._next()
            return
        self._batches += 1
        if self._batches % self._unit:
            return
        self._sync()
        seconds = time.perf_counter() - self._unit_at
        trial, turn = self._trial, self._turns[self._units]  # who trained this unit
        self._units += 1
        if self._units == 1:
            self._first = seconds
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

    def stop(self) -> None:
        """The training ended during the trials: the best so far stays on, and the
        record says where they stopped."""
        if not self.active:
            return
        trial, current = self._trial, self._current
        if trial is not None and trial.status == "skipped":  # under way: not judged
            trial.why = "the training ended during this candidate's steps"
            trial.steps = self._units * self._unit + self._batches % self._unit
        if current is not None and current is not self._best:
            current.off()
            self._best.on()
        baseline = self._trials[0]
        if baseline.status != "baseline":
            self._finish("not tuned: the training ended during the baseline's steps")
            return
        self._finish("tuned")

    def undo(self) -> None:
        """The training is over (or failed): the trials stop if under way, and the kept
        candidate goes off, the modules and optimizer as the script made them (the SDPA
        attention of a model stays, as ``report.tuning`` says)."""
        self.stop()
        if not self._best.stays:
            self._best.off()

    # -- candidates ------------------------------------------------------------------

    def _start(self) -> None:
        before = trials.decide_before(self._mode, self._torch, self._device, self._planned)
        decision = self._decide(before)
        if decision != "tuned":
            self._trials.append(Trial("eager", dict(self._best.settings), status="baseline"))
            self._finish(decision)
            return
        self._begin_trial(self._best)

    def _begin_trial(self, candidate: _Candidate) -> None:
        self._current = candidate
        self._trial = Trial(candidate.name, dict(candidate.settings))
        self._trials.append(self._trial)
        self._times, self._rivals, self._first, self._units = [], [], None, 0
        self._turns = trials.turns(baseline=candidate is self._best)
        self._side = trials.CANDIDATE
        self._batches = 0

    def _take_turn(self, turn: str) -> None:
        """Before the next unit of the paired rounds: the current candidate off and the
        best so far on for the best's unit, or the candidate on again for its own."""
        current = self._current
        if turn == self._side or current is None:
            return
        try:
            if turn == trials.BEST:
                current.off()
                self._best.on()
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
        trial.steps = self._units * self._unit
        if candidate is self._best:  # the baseline
            trial.status = "baseline"
            decision = self._decide(
                trials.decide_after(self._mode, trial.step_seconds / self._unit, self._planned)
            )
            if decision != "tuned":
                self._finish(decision)
                return
        else:
            best = trials.best_so_far(self._trials).name
            trials.pair(trial, best, self._times, self._rivals)
            if candidate.settings.get("compile") and self._first:
                trial.compile_seconds = round(max(self._first - trial.step_seconds, 0.0), 3)
            if (why := self._recompiled(candidate)) is not None:
                self._drop(why)  # and on to the next
                return
            self._judge(trial, candidate)
        self._next()

    def _judge(self, trial: Trial, candidate: _Candidate) -> None:
        best = trials.best_so_far(self._trials)
        faster = trials.clearly_faster(trial, best)
        if self._decide("chosen" if faster else "slower") == "chosen":
            trials.overtake(trial, best)
            self._best = candidate
            return
        trial.status = "slower"
        trial.why = trials.why_not(trial, best)
        candidate.off()
        self._best.on()

    def _drop(self, why: str, *, idle: int = 0) -> None:
        """The current candidate failed: off, and the best back on. The next one starts
        after `idle` more batches (the rest of the unit under way), or now."""
        assert self._trial is not None and self._current is not None
        self._trial.status, self._trial.why = "failed", why
        self._trial.steps = self._units * self._unit + (1 if idle else 0)
        self._current.off()
        self._best.on()
        self._idle = idle
        if not idle:
            self._next()

    def _next(self) -> None:
        while self._queue:
            candidate = self._queue.pop(0)()
            if candidate is None:
                continue
            try:
                candidate.on()
            except Exception as error:  # noqa: BLE001 - a candidate that cannot start is a finding
                failed = Trial(candidate.name, candidate.settings, "failed", why=guards.why(error))
                self._trials.append(failed)
                continue
            self._begin_trial(candidate)
            return
        self._finish("tuned")

    def _fused(self) -> _Candidate | None:
        if self._optimizer is None:
            self._skipped("optimizer", "not one torch optimizer to switch")
            return None
        variant, why = optimizers.faster_variant(self._optimizer)
        if variant is None:
            self._skipped("optimizer", why)
            return None
        settings = {**self._best.settings, "optimizer": variant.name}
        return _Candidate(
            f"{self._best.name}+{variant.name}",
            settings,
            on=lambda: optimizers.use(self._optimizer, variant, True),
            off=lambda: optimizers.use(self._optimizer, variant, False),
        )

    def _sdpa(self) -> _Candidate | None:
        switch, why = attention.candidate(self._module)
        if switch is None:
            if why:
                self._skipped("sdpa", why)
            return None
        optimizer = self._best.settings.get("optimizer", "default")
        return _Candidate(
            "eager" + ("" if optimizer == "default" else f"+{optimizer}") + "+sdpa",
            {**self._best.settings, "attention": attention.SDPA},
            on=switch.on,
            off=switch.off,
            checked=True,
            stays=True,
        )

    def _compiled_step(self) -> _Candidate | None:
        if self._compile_step is None or self._compile_fixed is not None:
            return None  # `_compiled` records why compile is not a candidate
        try:
            switch = self._compile_step()
        except Exception as error:  # noqa: BLE001 - the forward-only compile comes next
            settings = {"compile": True, "compiled": "training_step"}
            self._trials.append(Trial("compile step", settings, "failed", why=guards.why(error)))
            return None
        return self._compile_candidate("compile", switch, "training_step")

    def _compiled(self) -> _Candidate | None:
        if self._compile_fixed is not None:
            self._skipped("compile", self._compile_fixed)
            return None
        if any(t.settings.get("compiled") and t.status != "failed" for t in self._trials):
            return None  # the whole step was measured: its forward alone would not pay
        if not self._targets:
            self._skipped("compile", "no module with parameters to compile")
            return None
        compiled = Compiled(self._torch, self._targets)
        return self._compile_candidate("compile", compiled, "forward")

    def _graphed(self) -> _Candidate | None:
        """CUDA graphs (``mode="reduce-overhead"``) of what compile compiled (the whole step
        or the forward pass), whether or not that compile was kept, as in the fit: on a
        launch-bound step compile alone gains nothing, its graphs most (ResNet-50 B64,
        docs/benchmarks.md). On top of the best so far, compile's place taken."""
        compiled = self._compile_trial()
        ddp = parallel.world() is not None
        why = self._compile_fixed or graphs.unsupported(
            self._torch, self._device, ddp=ddp, compiled=compiled
        )
        if why:
            self._skipped("cudagraphs", why)
            return None
        assert compiled is not None  # else `graphs.unsupported` said why
        code = compiled.settings["compiled"]
        self._trees_owned = not graphs.trees(self._torch, self._device)
        switch = self._compiled_anew(code, graphs.REDUCE_OVERHEAD)
        return self._compile_candidate("cudagraphs", switch, code, cudagraphs=True)

    def _autotuned(self) -> _Candidate | None:
        """max-autotune of what the kept compile compiled (the whole step or the forward
        pass; with its CUDA graphs where those were kept), where the run left pays for
        it; it replaces that compile while on."""
        kept = trials.best_so_far(self._trials)
        why = (
            self._compile_fixed
            or trials.autotune_unsupported(self._device, kept)
            or trials.autotune_unpaid(
                self._planned, self._steps, kept, self._unit, default_compile(self._trials)
            )
        )
        if why:
            self._skipped("max-autotune", why)
            return None
        graphed = bool(self._best.settings.get("cudagraphs"))
        mode = graphs.AUTOTUNE if graphed else graphs.AUTOTUNE_NO_GRAPHS
        code = self._best.settings["compiled"]
        switch = self._compiled_anew(code, mode)
        return self._compile_candidate("max-autotune", switch, code, compile_mode=mode)

    def _compile_trial(self) -> Trial | None:
        """The trial of the default compile that ran last (the whole step's, or the forward
        pass's after it failed); None when compile was not tried."""
        return next(
            (
                t
                for t in reversed(self._trials)
                if t.settings.get("compiled") and t.status != "skipped"
            ),
            None,
        )

    def _compiled_anew(self, code: str, mode: str) -> Any:
        """The switch of `code` (``"training_step"`` or ``"forward"``) compiled anew in
        torch.compile's `mode`, made with the best so far off, so that its `off` puts
        back the uncompiled code."""
        self._best.off()
        try:
            if code == "training_step" and self._compile_step is not None:
                return self._compile_step(mode=mode)
            return Compiled(self._torch, self._targets, mode=mode)
        finally:
            self._best.on()

    def _compile_candidate(
        self, name: str, switch: Any, compiled: str, **settings: Any
    ) -> _Candidate:
        optimizer = self._best.settings.get("optimizer", "default")
        sdpa = "+sdpa" if self._best.settings.get("attention") else ""
        step = " step" if compiled == "training_step" else ""
        return _Candidate(
            name + step + ("" if optimizer == "default" else f"+{optimizer}") + sdpa,
            {**self._best.settings, "compile": True, "compiled": compiled, **settings},
            on=switch.on,
            off=switch.off,
            checked=True,
        )

    def _skipped(self, name: str, why: str) -> None:
        self._trials.append(Trial(name, {}, status="skipped", why=why))

    # -- the check -------------------------------------------------------------------

    def _check(self, candidate: _Candidate, batch: Any) -> str | None:
        """Why `candidate` computes something else than the eager step on `batch`, or
        None. Leaves the module as it found it, with `candidate` on; where the door's
        `forward_backward` runs on copies of the module (`reference.copy_of`), the
        module's own step is not run here at all."""
        torch = self._torch
        params = [p for p in self._module.parameters() if p.requires_grad]
        sample = reference.GradSample(params, torch)
        candidate.off()
        if not self._best.settings.get("compile"):  # a compiled best: off is eager already
            self._best.on()
        try:
            eager = reference.eager_reference(
                self._forward_backward,
                batch,
                module=self._module,
                params=params,
                sample=sample,
                device=self._device,
                torch=torch,
            )
        except reference.NotCopied as error:  # no copy to run the check on: not checked
            return str(error)
        finally:
            candidate.on()
        record = Check()
        if self._trial is not None:
            self._trial.check = record  # the figures, passed or failed (report.tuning)
        try:
            with reference.kept(self._module, params, self._device, torch):
                for param in params:
                    param.grad = None
                loss = self._forward_backward(batch)
                guards.check_loss(float(loss.detach().float()), eager, record)
                guards.check_grads(sample(), eager, record)
        except Exception as error:  # noqa: BLE001 - a compile error, an OOM, a mismatch
            if self._device.type == "cuda":
                torch.cuda.empty_cache()
            if self._trial is not None and not record.compared:
                self._trial.check = None  # it failed before anything was compared
            return guards.why(error)
        return None

    def _recompiled(self, candidate: _Candidate) -> str | None:
        if not candidate.settings.get("compile"):
            return None
        graphs = _graphs_compiled() - self._graphs
        if graphs <= RECOMPILES_ALLOWED:
            return None
        return (
            f"recompiles as it trains: {graphs} graphs compiled in its "
            f"{trials.TIMED_UNITS} timed steps (a guard on a value that changes every step)"
        )

    def _storm(self) -> None:
        if self._current is None or not self._current.settings.get("compile"):
            return
        storm = guards.graph_breaks(self._torch) - self._breaks
        if storm > trials.GRAPH_BREAK_STORM:
            self._drop(f"graph break storm: {storm} breaks")

    # -- the end ---------------------------------------------------------------------

    def _finish(self, decision: str) -> None:
        best = self._best
        if self._trees_owned and graphs.left_behind(self._trials, best.settings):
            graphs.release(self._torch, self._device)
        self.result = TuneResult(
            decision=decision,
            trials=tuple(self._trials),
            compile=bool(best.settings.get("compile")),
            optimizer=str(best.settings.get("optimizer", "default")),
            seconds=time.perf_counter() - self._started_at,
            steps=self._steps,
            attention=best.settings.get("attention"),
        )
        level = logging.INFO if self._steps else logging.DEBUG
        _log.log(level, "tune: %s", trials.summary(self.result))

    def _sync(self) -> None:
        if self._device.type == "cuda":
            self._torch.cuda.synchronize(self._device)


def safely(build: Callable[[], TrainerTrials | TuneResult]) -> TrainerTrials | TuneResult:
    """`build()`, or the record of why the trials could not start: tune never stops a run.

    Example:
        >>> safely(lambda: 1 / 0).decision  # doctest: +ELLIPSIS
        'not tuned: the trials could not start (ZeroDivisionError: division by zero)'
    """
    try:
        return build()
    except Exception as error:  # noqa: BLE001 - the run trains as configured
        why = guards.why(error)
        _log.warning("accelkit: tune could not start (%s); the run trains as configured", why)
        return not_tuned(f"the trials could not start ({why})")


def not_tuned(why: str) -> TuneResult:
    """The record of a run that a door does not tune, and why.

    Example:
        >>> not_tuned("the fit shards the model").decision
        'not tuned: the fit shards the model'
    """
    baseline = Trial("eager", {"compile": False, "optimizer": "default"}, status="baseline")
    return TuneResult(f"not tuned: {why}", (baseline,), False, "default", 0.0, 0)


def scalar_of(output: Any) -> Any:
    """What the check compares of a model's `output`: its loss (the fit's rule,
    `torch_batches.loss_of`), else the mean square of its first tensor (a trainer that
    computes the loss itself), whose backward pass reaches every output value.

    Example:
        >>> import torch
        >>> float(scalar_of({"logits": torch.ones(2, 3)}))
        1.0
    """
    try:
        return torch_batches.loss_of(output)
    except ValueError:
        found = torch_batches.first_tensor(output)
        if found is None:
            raise
        return found.float().square().mean()


def _no() -> None:
    return None


def _graphs_compiled() -> int:
    """Graphs dynamo has compiled in this process (0 where its counter is not there)."""
    try:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])
    except Exception:  # noqa: BLE001 - a private counter: no count, no recompiles seen
        return 0
