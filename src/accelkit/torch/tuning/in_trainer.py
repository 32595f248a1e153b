"""`tune` inside a trainer's own loop: the trials of the Lightning and Hugging Face callbacks.

A trainer runs its steps itself. The callback tells `TrainerTrials` where each training
batch begins and ends (`begin`, `end`) and shows it each batch before the forward pass
(`batch`); `TrainerTrials` is the trainers' door of the one trial engine
(`accelkit.torch.tuning.engine`), which switches candidates between steps. The levers
(`accelkit.torch.tuning.registry`), limits and record are the fit's; as a trainer's
door it compiles the trainer's code and checks a candidate before the trainer's step:

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
   so far, checked like compile, its pass run twice in the check so that the graphs
   record there (`TrainerTrials._record_graphs`);
6. on a CUDA device, where compile was kept and the run left pays for it
   (`trials.autotune_unpaid`), the same code compiled with ``mode="max-autotune"`` (with
   CUDA graphs where those were kept, else ``"max-autotune-no-cudagraphs"``) in its place
   (checked against the eager step);
7. on a GPU with float8 tensor cores and torchao installed, where the kept step is
   compiled, the large linear layers in float8 (`accelkit.torch.tuning.float8`),
   checked against the bf16 step with float8's own tolerance.

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

An error in the trainer's step during a candidate's trial ends that trial, not the
training, where a wrapper of the trials stands between the trainer and the code that
raised: the compiled code's own, and during a trial the eager forward passes
(`_EagerGuard`); the batch's forward pass runs again with the best so far
(`TrainerTrials.rescue`).
"""

from __future__ import annotations

import functools
import logging
import types
from collections.abc import Callable
from typing import Any

from accelkit.profiling import torch_batches
from accelkit.profiling.levers import Settings
from accelkit.profiling.tuning import Check, Trial, TuneResult
from accelkit.torch.distributed import parallel
from accelkit.torch.tuning import compiling, graphs, reference, registry
from accelkit.torch.tuning import trial_guards as guards
from accelkit.torch.tuning.candidate import Candidate
from accelkit.torch.tuning.engine import RECOMPILES_ALLOWED, Engine

_log = logging.getLogger("accelkit")

__all__ = ["RECOMPILES_ALLOWED", "Compiled", "TrainerTrials", "not_tuned", "safely", "scalar_of"]


def never(error: BaseException) -> bool:
    """The `rescue` of code compiled outside a trainer's trials: every error is raised."""
    return False


class Compiled:
    """``torch.compile`` of `modules`' forward passes, switched on and off in place.

    The compiled forward is set as each module's own ``forward`` attribute, the one
    ``module(...)`` calls: the module's hooks (the callbacks' batch readers) stay outside
    the compiled code, and `off` puts back exactly what was there (a trainer's own
    wrapper, such as Accelerate's autocast of ``forward``). Compiling happens at the first
    call after `on`; outside tune's check (`strict`), a forward that fails to compile (a
    new shape's, its backward pass included) runs eagerly (`compiled_method`).

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

    def __init__(
        self,
        torch: Any,
        modules: list[Any],
        mode: str | None = None,
        rescue: Callable[[BaseException], bool] = never,
        strict: Callable[[], bool] = compiling.always,
    ) -> None:
        self._modules = modules
        self._saved = [vars(module).get("forward") for module in modules]
        self._compiled = [
            _compiled_forward(torch, module, mode, rescue, strict) for module in modules
        ]

    def on(self) -> None:
        for module, compiled in zip(self._modules, self._compiled, strict=True):
            module.forward = compiled

    def off(self) -> None:
        _put_back(self._modules, self._saved)


class _EagerGuard:
    """`modules`' forward passes as they are, their errors offered to `rescue` while on:
    the trainer's step runs eager code during a candidate's trial (an eager candidate's
    units, the best's units of its paired rounds where compile was not kept), and no
    compiled wrapper stands there to hand an error to the trials. `on` sets each module's
    ``forward`` to the guarded one, `off` puts back exactly what was there; the trainers'
    door keeps it on for one batch at a time."""

    def __init__(self, modules: list[Any], rescue: Callable[[BaseException], bool]) -> None:
        self._modules, self._rescue = modules, rescue
        self._saved: list[Any] | None = None

    def on(self) -> None:
        if self._saved is not None:
            return
        self._saved = [vars(module).get("forward") for module in self._modules]
        for module in self._modules:
            module.forward = _rescued_forward(module, self._rescue)

    def off(self) -> None:
        saved, self._saved = self._saved, None
        if saved is not None:
            _put_back(self._modules, saved)


def _rescued_forward(module: Any, rescue: Callable[[BaseException], bool]) -> Any:
    """`module`'s forward as it is, run again where `rescue` takes its error as a trial's
    end (the candidate is off then, the best on); bound to the module like a compiled
    forward, so that the check's copy runs it on itself."""
    method, function = _method_of(module, "forward")
    if function is None:
        return rescued(method, rescue, method)
    return bound(rescued(function, rescue, function), function, module)


def _method_of(module: Any, name: str) -> tuple[Any, Any]:
    """``(method, function)``: `module`'s attribute `name` as it is, and the function
    under it where it is a method bound to `module` (None otherwise: a wrapper's plain
    function, or a method of another object)."""
    method = getattr(module, name)
    if getattr(method, "__self__", None) is not module:
        return method, None
    return method, getattr(method, "__func__", None)


def _put_back(modules: list[Any], forwards: list[Any]) -> None:
    """Each module's ``forward`` attribute as saved (None: the class's own)."""
    for module, saved in zip(modules, forwards, strict=True):
        if saved is None:
            vars(module).pop("forward", None)
        else:
            module.forward = saved


def compiled_method(
    torch: Any,
    module: Any,
    name: str,
    strict: Callable[[], bool] = compiling.always,
    **options: Any,
) -> tuple[Any, Any]:
    """``torch.compile`` of `module`'s method `name`: ``(compiled, function)``. `function`
    is the function under the bound method, and `compiled` takes the module as its first
    argument, so that a copy of `module` (the check's, `reference.copy_of`) runs the same
    compiled code on itself and the trainer's step reuses what the check compiled; or
    None where `name` is no method of `module` (a wrapper's plain function, compiled as
    it is). Its compile errors reach no further than the call, where they raise while
    `strict()` (`compiling.contained`). In a mode that captures CUDA graphs the outputs
    are copied out of the graphs' pool (`graphs.replayed`).

    Example:
        >>> import torch
        >>> layer = torch.nn.Linear(4, 2)
        >>> compiled, function = compiled_method(torch, layer, "forward")
        >>> function is torch.nn.Linear.forward
        True
    """
    method, function = _method_of(module, name)
    compiled = torch.compile(method if function is None else function, **options)
    compiled = compiling.contained(torch, compiled, strict)
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


def as_it_is(name: str) -> Callable[..., Any]:
    """``function(module, ...)``: `module`'s method `name` as it is at the call (the best
    so far's, once a candidate is off): what `rescued` runs again."""

    def call(module: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(module, name)(*args, **kwargs)

    return call


def rescued(
    call: Callable[..., Any], rescue: Callable[[BaseException], bool], again: Callable[..., Any]
) -> Callable[..., Any]:
    """`call`; where it raises an error that `rescue(error)` takes as its trial's end
    (`TrainerTrials.rescue`), `again` with the same arguments: the trainer's step goes
    on with the best so far. Any other error raises as it was.

    Example:
        >>> def out_of_memory(x):
        ...     raise MemoryError("a candidate's step")
        >>> rescued(out_of_memory, lambda error: True, lambda x: x + 1)(1)
        2
    """

    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, **kwargs)
        except Exception as error:
            if not rescue(error):
                raise
        return again(*args, **kwargs)

    return run


def _compiled_forward(
    torch: Any,
    module: Any,
    mode: str | None,
    rescue: Callable[[BaseException], bool],
    strict: Callable[[], bool],
) -> Any:
    """`module`'s forward compiled, its error in the trainer's step `rescue`d: the forward
    the module has then (the best's) runs instead."""
    compiled, function = compiled_method(torch, module, "forward", strict, mode=mode)
    if function is None:
        return rescued(compiled, rescue, functools.partial(as_it_is("forward"), module))
    return bound(rescued(compiled, rescue, as_it_is("forward")), function, module)


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
        compile_step: ``compile_step(mode=None, rescue=never, strict=always) -> switch``
            (``on()``, ``off()``): the whole training step compiled (in torch.compile's
            `mode`), its compile errors raised only while `strict()`
            (`TrainerTrials.checking`), its errors in the trainer's step offered to
            `rescue` (`TrainerTrials.rescue`),
            tried before `compile_targets`, which are tried only if it fails (None: the
            door has no step to compile).
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
        >>> tuning.result.decision, len(tuning.result.trials)
        ('tuned', 5)
        >>> 26 <= tuning.result.steps <= 42   # 10 a later candidate, 18 if its rounds ran twice
        True
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

        self.module, self.optimizer, self.device = module, optimizer, device
        self.unit, self.planned = batches_per_unit, planned_steps
        self.compile_fixed = compile_fixed
        self.under_ddp = parallel.world() is not None
        self.ended = "training"
        self._torch = torch
        self._targets, self._compile_step = compile_targets, compile_step
        self._forward_backward = forward_backward
        self._decide, self._on_step = decide, on_step
        self._checking = False  # the check's passes run (their errors are the check's)
        self._guard = _EagerGuard(compile_targets, self.rescue)
        self._engine = Engine(self, mode=mode, levers=registry.candidates)
        # A compile the trainer or the script fixed is the baseline's: what it trains
        # with, and what float8 is tried on top of.
        self._engine.start(Settings(compile=compile_fixed is not None))

    @property
    def active(self) -> bool:
        """True while trials run (the callback tells it about each batch)."""
        return self._engine.active

    @property
    def result(self) -> TuneResult | None:
        """The record, once the trials ended."""
        return self._engine.result

    def begin(self) -> None:
        """A training batch begins (before its forward pass): during a candidate's trial,
        eager code that trains is guarded (`_EagerGuard`)."""
        engine = self._engine
        engine.begin()
        if engine.trying and not engine.on_now.settings.compile:
            self._guard.on()

    def batch(self, batch: Any) -> None:
        """The batch the trainer is about to train on (checks a candidate's first)."""
        self._engine.batch(batch)

    def end(self) -> None:
        """The batch's backward pass and optimizer step (if any) are done."""
        self._guard.off()  # before the engine switches candidates
        self._engine.end()

    def stop(self) -> None:
        """The training ended during the trials: the best so far stays on, and the
        record says where they stopped."""
        self._guard.off()
        self._engine.stop()

    def undo(self) -> None:
        """The training is over (or failed): the trials stop if under way, and the kept
        candidate goes off, the modules and optimizer as the script made them (the SDPA
        attention of a model stays, as ``report.tuning`` says)."""
        self._guard.off()
        self._engine.undo()

    def rescue(self, error: BaseException) -> bool:
        """Whether `error`, raised in the trainer's own step by compiled code a trial
        switched on, or by a forward pass that trains eagerly during a trial
        (`_EagerGuard`), is that trial's end rather than the run's: True while a
        candidate's trial is under way (its paired rounds included) and not in its check,
        which records its own errors. The candidate is dropped, the best so far is on
        again (the CUDA graphs' memory given back: `Engine`), and the caller runs the
        step's code again with it (`rescued`). Before, a candidate's error in the
        trainer's step stopped the trainer: CUDA graphs out of memory as they record,
        which they did there while the check only warmed them up (it records them too
        now: `_record_graphs`), and still can where a new shape records them again; and
        the best's eager forward pass out of memory beside the graphs' pool in their
        paired rounds. An error in a backward pass or an optimizer step that no wrapper
        reaches still stops the trainer (the fit's door catches its whole step)."""
        engine = self._engine
        if self._checking or not engine.trying:
            return False
        _log.info(
            "tune: a candidate failed in the trainer's step (%s); the step goes on with the "
            "best so far",
            guards.why(error),
        )
        engine.failed(error, left=engine.unit_left)
        if self.device.type == "cuda":
            self._torch.cuda.empty_cache()
        return True

    def checking(self) -> bool:
        """Whether a candidate's check runs: its compile errors are the check's to record
        (`compiling.contained`); outside it a frame that fails to compile runs eagerly."""
        return self._checking

    # -- the door (`accelkit.torch.tuning.engine.Door`) -------------------------------

    def decide(self, value: Any) -> Any:
        return self._decide(value)

    def on_step(self) -> None:
        self._on_step()

    def compilers(self) -> tuple[list[tuple[str | None, Callable[[str | None], Any]]], str | None]:
        """The whole training step where the door can compile it, then the forward passes
        of the modules with parameters."""
        codes: list[tuple[str | None, Callable[[str | None], Any]]] = []
        if self._compile_step is not None:
            make_step = self._compile_step
            codes.append(
                (
                    "training_step",
                    lambda mode: make_step(mode=mode, rescue=self.rescue, strict=self.checking),
                )
            )
        if self._targets:
            codes.append(
                (
                    "forward",
                    lambda mode: Compiled(
                        self._torch, self._targets, mode, self.rescue, self.checking
                    ),
                )
            )
        return codes, None if codes else "no module with parameters to compile"

    def ddp_levers(self) -> list[Any]:
        return []  # the trainer wraps the model itself: its DDP options are the trainer's

    def step_switch(self, lever: Any) -> Any:
        raise NotImplementedError("the trainers have no DDP levers")

    def check(self, candidate: Candidate, best: Candidate, batch: Any, trial: Trial) -> str | None:
        """Why `candidate` computes something else than the eager step on `batch`, or
        None. Leaves the module as it found it, with `candidate` on; where the door's
        `forward_backward` runs on copies of the module (`reference.copy_of`), the
        module's own step is not run here at all."""
        self._checking = True
        try:
            return self._check(candidate, best, batch, trial)
        finally:
            self._checking = False

    def _check(self, candidate: Candidate, best: Candidate, batch: Any, trial: Trial) -> str | None:
        torch = self._torch
        params = [p for p in self.module.parameters() if p.requires_grad]
        sample = reference.GradSample(params, torch)
        candidate.off()
        if not best.settings.compile:  # a compiled best: off is eager already
            best.on()
        try:
            eager = reference.eager_reference(
                self._forward_backward,
                batch,
                module=self.module,
                params=params,
                sample=sample,
                device=self.device,
                torch=torch,
            )
        except reference.NotCopied as error:  # no copy to run the check on: not checked
            return str(error)
        finally:
            candidate.on()
        record = trial.check = Check()  # the figures, passed or failed (report.tuning)
        try:
            with reference.kept(self.module, params, self.device, torch):
                for param in params:
                    param.grad = None
                loss = float(self._forward_backward(batch).detach().float())
                guards.check_loss(loss, eager, record, candidate.tolerance)
                guards.check_grads(sample(), eager, record, candidate.tolerance)
                if candidate.settings.cudagraphs:
                    self._record_graphs(batch, params)
        except Exception as error:  # noqa: BLE001 - a compile error, an OOM, a mismatch
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            if not record.compared:
                trial.check = None  # it failed before anything was compared
            return guards.why(error)
        return None

    def _record_graphs(self, batch: Any, params: list[Any]) -> None:
        """The candidate's pass once more, inside the check: inductor's CUDA-graph trees
        warm a function up on its first call and record its graphs on a later one
        (``torch/_inductor/cudagraph_trees.py``, ``CUDAGraphTreeManager._run``), so the
        graphs' memory pool is taken here, where an error (out of memory) is the check's,
        rather than in the trainer's next step, whose backward pass `rescue` cannot reach.
        The caller's `reference.kept` puts the gradients back."""
        for param in params:
            param.grad = None
        self._forward_backward(batch)


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
