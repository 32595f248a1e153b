"""`Tuner`: tune's trials in the fit's own loop (`accelkit.torch.fit`, `accelkit.torch.tune`).

The fit owns its batches, so it pushes them to the one trial engine as the trainers do
(`accelkit.torch.tuning.engine`): `Tuner.run` draws each batch, tells the engine where it
begins and ends, and trains it through the step the candidate on now trains with. The
door's part is what the fit alone can do: a candidate that raises in its step is caught
(a compile error, out of memory) and its unit trained again with the best step so far;
a candidate is checked during its first unit itself (`trial_guards.checked`), against an
eager reference computed on a copy of the module (`reference.copy_of`); a DDP lever
re-wraps the module or switches the wrapper's communication hook.
`accelkit.torch.tuning.trials` describes the protocol and holds its limits and result.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Iterator
from typing import Any

from accelkit.profiling.levers import Settings
from accelkit.profiling.tuning import Check, Trial, TuneResult
from accelkit.torch.training.step import Step, TrainOne
from accelkit.torch.tuning import compiling, graphs, levers, reference, registry
from accelkit.torch.tuning import trial_guards as guards
from accelkit.torch.tuning.candidate import Candidate, Skipped
from accelkit.torch.tuning.engine import Engine
from accelkit.utils.imports import require

_log = logging.getLogger("accelkit")


class Tuner:
    """Runs the trials inside a training loop; `run` returns the step to keep.

    Args:
        base: the step the plan's settings give (eager unless compile was fixed on).
        module: the module trained (the eager reference of the compile check runs on a
            copy of it, its gradients, buffers and random number generators put back after).
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
        ['eager', 'eager+fused', 'compile', 'cudagraphs', 'max-autotune']
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
        self.module, self.optimizer, self.device = module, optimizer, device
        self.unit, self.planned = accumulation_steps, planned_steps
        fixed = True if base.compiled else compile_fixed
        self.compile_fixed = (
            None if fixed is None else f"compile={fixed} was set by the script or the plan"
        )
        self.under_ddp = graphs.under_ddp(base)
        self.ended = "data"
        self.step = base  # what the candidate on now trains with
        self._base = base
        self._decide = decide
        self._levers = levers
        self._checking: Step | None = None  # the checked candidate's first unit trains this
        self._checking_left = 0
        self._taken: list[Any] = []  # the batches of the unit under way
        self._on_step: Callable[[], None] = lambda: None
        self._engine = Engine(self, mode=mode, levers=registry.candidates)

    @property
    def result(self) -> TuneResult | None:
        """The record, once the trials ended."""
        return self._engine.result

    @property
    def recount(self) -> bool:
        """float8 was kept: the step's FLOPs are counted again, their float8 share with them."""
        return self.result is not None and self.result.float8

    # -- the loop --------------------------------------------------------------------

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
        self._on_step = on_step
        engine = self._engine
        engine.start(Settings(compile=self._base.compiled, ddp=self._ddp(self._base)))
        while engine.active:
            batch = next(batches, None)
            if batch is None:
                engine.stop()
                break
            self._train(batch, train_one)
            if limit_reached() and engine.active:
                engine.stop()
        return self.step

    def _train(self, batch: Any, train_one: TrainOne) -> None:
        """One batch of the trials, through the engine; a candidate's error is its end."""
        engine = self._engine
        engine.begin()
        engine.batch(batch)
        self._taken.append(batch)
        step = self._checking or self.step
        if not engine.trying:  # the baseline's or the best's own: the user's errors
            train_one(batch, step)
        else:
            try:
                train_one(batch, step)
            except Exception as error:  # noqa: BLE001 - a candidate's failure is a finding
                self._failed(error, train_one)
                return
        engine.end()
        if self._checking is not None:
            self._checking_left -= 1
            if not self._checking_left:
                self._checking = None
        if len(self._taken) == self.unit:
            self._taken = []

    def _failed(self, error: BaseException, train_one: TrainOne) -> None:
        """Train the failed candidate's unit again with the best step so far, from zeroed
        gradients. The user's own error (bad data, a bug in the loss) raises again here.
        The unit's batches before the failed one were counted already: they give their
        gradients again without being counted twice, so the accumulation stays in phase
        (the optimizer steps where it would have without the trial); the rest of the unit
        trains after it, before the next candidate starts."""
        *counted, failed = self._taken
        _log.info(
            "tune: a candidate failed (%s); its %d batch(es) train again with the best step",
            guards.why(error),
            len(self._taken),
        )
        self._checking = None
        self._engine.failed(error, left=self.unit - len(counted))
        self.optimizer.zero_grad(set_to_none=True)
        guards.reset_scaler(self._base.scaler)
        if self.device.type == "cuda":
            self._torch.cuda.empty_cache()
        for batch in counted:
            train_one(batch, self.step, again=True)
        self._taken = counted
        self._train(failed, train_one)

    # -- the door (`accelkit.torch.tuning.engine.Door`) -------------------------------

    def decide(self, value: Any) -> Any:
        return self._decide(value)

    def on_step(self) -> None:
        self._on_step()

    def compilers(self) -> tuple[list[tuple[str | None, Callable[[str | None], Any]]], str | None]:
        """The fit compiles its forward pass and loss together."""
        return [(None, self._compiled)], None

    def _compiled(self, mode: str | None) -> _StepSwitch:
        """The step on now (the best so far, uncompiled: `compiling.made`) with its forward
        and loss compiled in `mode` (its CUDA graphs where the mode captures them), its
        compile errors raised in its checked first unit and outside it falling back to
        eager (`compiling.contained`)."""
        eager = self.step
        contain = functools.partial(
            compiling.contained,
            self._torch,
            strict=lambda: self._checking is not None,  # the check records its errors
        )
        if graphs.captures(mode):
            step = graphs.step(
                self._torch, eager, mode=mode or graphs.REDUCE_OVERHEAD, contain=contain
            )
        else:
            compiled = contain(self._torch.compile(eager.forward_loss, mode=mode))
            step = dataclasses.replace(eager, forward_loss=compiled, compiled=True)
        return _StepSwitch(self, step)

    def ddp_levers(self) -> Any:
        return self._levers.candidates() if self._levers is not None else ()

    def step_switch(self, lever: Any) -> Candidate | Skipped:
        """A DDP lever on top of the best so far: its step while on, the best's while off;
        a lever on the same wrapper (bf16 gradients: its hook's compression) is applied
        again when switched on, one that re-wrapped the module is a step of its own."""
        before = self.step
        try:
            step = lever.apply(before)
        except Exception as error:  # noqa: BLE001 - a wrapper DDP refuses is a finding
            return Skipped(lever.name, guards.why(error), failed=True)
        in_place = step.model is before.model

        def on() -> None:
            if in_place:
                lever.apply(before)
            self.step = step

        def off() -> None:
            lever.undo()
            self.step = before

        settings = self._engine.best.settings.with_(ddp=self._ddp(step))
        return Candidate(settings, on=on, off=off, verify=lever.verify)

    def check(self, candidate: Candidate, best: Candidate, batch: Any, trial: Trial) -> str | None:
        """Arm the check of `candidate`'s first unit against the eager step on `batch`,
        whose reference runs now, on a copy of the module: the unit's steps compare their
        loss and gradients as they train, and raise on a mismatch (`guards.checked`).
        Returns why it is not tried instead (the module could not be copied), or None."""
        torch = self._torch
        params = [p for p in self.module.parameters() if p.requires_grad]
        sample = reference.GradSample(params, torch)
        candidate.off()  # the SDPA candidate is checked against the attention it replaces
        best.on()
        try:
            eager = reference.eager_reference(
                self._eager_pass,
                batch,
                module=self.module,
                params=params,
                sample=sample,
                device=self.device,
                torch=torch,
                average=self._as_reduced,
            )
        except reference.NotCopied as error:  # no copy to check on: not tried
            return str(error)
        finally:
            candidate.on()
        trial.check = Check()
        self._checking = guards.checked(self.step, eager, sample, trial.check, candidate.tolerance)
        self._checking_left = self.unit
        return None

    def _eager_pass(self, batch: Any) -> Any:
        """The baseline's forward and backward pass as the loop runs one micro-step, eager,
        on a copy of the module made for the pass (`reference.copy_of`: its parameters and
        buffers shared, its Python state copied), so that a model that keeps state in its
        forward (a counter, a curriculum) runs it on the module only in the run's own
        steps; under DDP no collective runs (every rank computes alike). The loss function
        is called as it is: the check needs its value."""
        base = self._base
        assert base.through is not None  # `make_step` builds every step with one
        loss = base.through(reference.copy_of(self.module), False).forward_loss(batch)
        base.scaler.scale(loss / self.unit).backward()
        return loss

    def _as_reduced(self, grads: Any) -> Any:
        """The eager gradients as the candidate's first micro-step leaves them: averaged
        over the ranks when that step all-reduces (DDP, no accumulation)."""
        if self._base.model is self.module or self.unit > 1:
            return grads
        distributed = self._torch.distributed
        grads = grads.clone()
        distributed.all_reduce(grads)
        return grads / distributed.get_world_size()

    @staticmethod
    def _ddp(step: Step) -> dict[str, Any]:
        return levers.trial_settings(step.ddp)


@dataclasses.dataclass
class _StepSwitch:
    """A candidate that is a step of its own (compiled, CUDA graphs): the fit trains with
    `step` while it is on, and with the step that was on before it while off."""

    tuner: Tuner
    step: Step

    def __post_init__(self) -> None:
        self.before = self.tuner.step

    def on(self) -> None:
        self.tuner.step = self.step

    def off(self) -> None:
        self.tuner.step = self.before
