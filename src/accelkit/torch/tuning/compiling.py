"""tune's compile levers: ``torch.compile`` of the door's code, its CUDA graphs, and
max-autotune, each a candidate on top of the best so far.

A door compiles what it can (`accelkit.torch.tuning.engine.Door.compilers`): the fit its
forward pass and loss, a LightningModule its whole ``training_step`` and else its
children's forward passes, a Hugging Face model its forward pass. The code tried first
that compiles is measured, and the next kind (part of the same code) only where it
failed: where the whole step was not clearly faster, its forward alone would not pay its
compile time either. CUDA graphs (``mode="reduce-overhead"``, `accelkit.torch.tuning.graphs`)
and max-autotune compile the same code again in their mode, in the place of the best so
far, each checked against the eager step like compile.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from accelkit.profiling.tuning import Trial, default_compile
from accelkit.torch.tuning import graphs, trials
from accelkit.torch.tuning import trial_guards as guards
from accelkit.torch.tuning.candidate import Candidate, Skipped

if TYPE_CHECKING:
    from accelkit.torch.tuning.engine import Engine

_log = logging.getLogger("accelkit")
# Where dynamo reports a frame it failed to compile and runs eagerly ("WON'T CONVERT").
_DYNAMO_LOG = logging.getLogger("torch._dynamo.convert_frame")


def compiled(engine: Engine) -> Iterator[Candidate | Skipped]:
    """``torch.compile`` (its default mode) of the door's code, the first kind that
    compiles, where neither the script nor the plan fixed compile."""
    door = engine.door
    if door.compile_fixed is not None:
        yield Skipped("compile", door.compile_fixed)
        return
    codes, none = door.compilers()
    if not codes:
        yield Skipped("compile", none or "nothing to compile")
        return
    for code, make in codes:
        settings = engine.best.settings.with_(compile=True, compiled=code)
        try:
            switch = made(engine, make, None)
        except Exception as error:  # noqa: BLE001 - the next kind of code comes next
            yield Skipped(settings.name(), guards.why(error), settings, failed=True)
            continue
        yield Candidate(settings, on=switch.on, off=switch.off, checked=True)
        if engine.trials[-1].status != "failed":  # measured: part of it would not pay
            return


def graphed(engine: Engine) -> Iterator[Candidate | Skipped]:
    """CUDA graphs (``mode="reduce-overhead"``) of what compile compiled, whether or not
    that compile was kept: on a launch-bound step compile alone gains nothing, its graphs
    most (ResNet-50 B64, docs/benchmarks.md)."""
    door, torch = engine.door, engine.torch
    trial = _compile_trial(engine.trials)
    why = door.compile_fixed or graphs.unsupported(
        torch, door.device, ddp=door.under_ddp, compiled=trial
    )
    if why:
        yield Skipped("cudagraphs", why)
        return
    assert trial is not None  # else `graphs.unsupported` said why
    code = trial.settings.get("compiled")
    engine.trees_owned = not graphs.trees(torch, door.device)
    switch = made(engine, _maker(engine, code), graphs.REDUCE_OVERHEAD)
    settings = engine.best.settings.with_(
        compile=True, compiled=code, cudagraphs=True, compile_mode=None
    )
    yield Candidate(settings, on=switch.on, off=switch.off, checked=True)


def autotuned(engine: Engine) -> Iterator[Candidate | Skipped]:
    """max-autotune of what the kept compile compiled (with its CUDA graphs where those
    were kept), where the run left pays for its compilation (`trials.autotune_unpaid`)."""
    door = engine.door
    kept = engine.best_trial()
    why = (
        door.compile_fixed
        or trials.autotune_unsupported(door.device, kept)
        or trials.autotune_unpaid(
            door.planned, engine.steps, kept, door.unit, default_compile(engine.trials)
        )
    )
    if why:
        yield Skipped("max-autotune", why)
        return
    best = engine.best.settings
    mode = graphs.AUTOTUNE if best.cudagraphs else graphs.AUTOTUNE_NO_GRAPHS
    switch = made(engine, _maker(engine, best.compiled), mode)
    settings = best.with_(compile=True, compile_mode=mode)
    yield Candidate(settings, on=switch.on, off=switch.off, checked=True)


def made(engine: Engine, make: Callable[[str | None], Any], mode: str | None) -> Any:
    """``make(mode)``, with a compiled best so far off while it is made, so that the new
    switch compiles the uncompiled code and its `off` puts that code back."""
    if not engine.best.settings.compile:
        return make(mode)
    engine.best.off()
    try:
        return make(mode)
    finally:
        engine.best.on()


def _maker(engine: Engine, code: str | None) -> Callable[[str | None], Any]:
    """What compiles `code` (None: the door's only kind) in a mode."""
    codes, _ = engine.door.compilers()
    return next((make for name, make in codes if name == code), codes[0][1])


def _compile_trial(tried: list[Trial]) -> Trial | None:
    """The trial of the default compile that ran last (the whole step's, or the forward
    pass's after it failed); None when compile was not tried."""
    return next(
        (
            t
            for t in reversed(tried)
            if t.settings.get("compile")
            and not t.settings.get("cudagraphs")
            and not t.settings.get("compile_mode")
            and t.status != "skipped"
        ),
        None,
    )


def always() -> bool:
    """The `contained` strictness outside tune's doors: every compile error raises."""
    return True


def contained(
    torch: Any, compiled: Callable[..., Any], strict: Callable[[], bool] = always
) -> Callable[..., Any]:
    """`compiled` (what ``torch.compile`` returned), its compile errors kept inside its
    calls, where the run survives them:

    - its backward pass is lowered when its forward compiles
      (``torch._functorch.config.force_non_lazy_backward_lowering``), not at the first
      backward pass, so that an error lowering it (a new shape's recompile) is raised in
      the compiled call, where the check, the trainers' `rescued` and the fallback below
      reach it, and not from ``loss.backward()``, which in a trainer's step no callback
      can catch;
    - while `strict()` (tune checks a candidate, which is where its compiled code first
      runs, and records what compiling raises as the candidate's failure) a compile
      error raises; otherwise a frame that fails to compile runs eagerly
      (``torch._dynamo.config.suppress_errors``) instead of stopping the run, from then
      on: dynamo skips that frame's code for good (``torch/_dynamo/types.py``,
      ``ConvertFrameReturn``), and accelkit logs a warning with dynamo's reason.

    Example:
        >>> import torch
        >>> step = contained(torch, torch.compile(torch.sin, backend="eager"))
        >>> float(step(torch.zeros(1)))
        0.0
    """
    dynamo = torch._dynamo.config
    functorch: Any = importlib.import_module("torch._functorch.config")
    early = hasattr(functorch, "force_non_lazy_backward_lowering")  # not in every torch
    heard = _EagerFallbacks()

    def call(*args: Any, **kwargs: Any) -> Any:
        # Set and put back by hand: ``config.patch`` costs several times more a call.
        suppress = dynamo.suppress_errors
        lazy = early and not functorch.force_non_lazy_backward_lowering
        dynamo.suppress_errors = not strict()
        if dynamo.suppress_errors:
            _DYNAMO_LOG.addHandler(heard)
        if lazy:
            functorch.force_non_lazy_backward_lowering = True
        try:
            return compiled(*args, **kwargs)
        finally:
            dynamo.suppress_errors = suppress
            if lazy:
                functorch.force_non_lazy_backward_lowering = False
            _DYNAMO_LOG.removeHandler(heard)
            heard.tell()

    return call


class _EagerFallbacks(logging.Handler):
    """Dynamo's reports of frames it failed to compile and runs eagerly from then on,
    while attached to its logger; `tell` says each once, as accelkit's warning."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.frames: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        first, *_ = record.getMessage().splitlines() or [""]
        if not first.startswith("WON'T CONVERT"):
            return
        error = record.exc_info[1] if record.exc_info else None
        where = first.removeprefix("WON'T CONVERT").strip()
        why = guards.why(error).split(" Set TORCHDYNAMO_VERBOSE")[0] if error else "?"
        self.frames.append(f"{where}: {why}")

    def tell(self) -> None:
        for frame in self.frames:
            _log.warning(
                "accelkit: tune's compiled code failed to compile for an input it had not "
                "seen, and runs eagerly from now on, slower, rather than stopping the run "
                "(%s)",
                frame,
            )
        self.frames.clear()
