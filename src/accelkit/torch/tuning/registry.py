"""Every lever tune tries, in the order it tries them: one entry each.

A lever is a function ``lever(engine) -> Iterator[Candidate | Skipped]`` in the module of
its technique: it reads the run (the door's module, optimizer and device, the best so far,
the trials so far, the steps taken) and yields its candidates on top of the best so far,
or a `Skipped` record saying why it does not apply here. The engine asks for the next
candidate only when the last one's trial is over, so a lever sees what came before it
(max-autotune reads the compile kept). Each candidate is `Candidate`: its typed
`accelkit.profiling.levers.Settings`, how it is switched on and off, whether it is checked
against the eager step, and for DDP's bf16 gradients a verification after its steps.

Its entry in `LEVERS` also says the most candidates it yields in a run (`Entry.most`),
from what the run holds before the trials start (`Scope`): `trial_units` sums them into
the most units the trials take, which bounds `accelkit.torch.tune`'s trials and is the
table of docs/profiling.md and docs/integrations.md. docs/architecture.md says how to
add a lever.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from accelkit.torch.tuning import attention, compiling, float8, levers, optimizers, trials
from accelkit.torch.tuning.candidate import Candidate, Skipped

if TYPE_CHECKING:
    from accelkit.torch.tuning.engine import Engine

Lever = Callable[["Engine"], Iterator[Candidate | Skipped]]


@dataclasses.dataclass(frozen=True)
class Scope:
    """What a run holds, before its trials, that decides which levers may yield a candidate.

    Attributes:
        cuda: it trains on a CUDA device (CUDA graphs, max-autotune).
        under_ddp: DDP all-reduces its gradients (CUDA graphs are not tried).
        ddp_levers: the door tries DDP's options (the fit's own DDP wrapper; the
            trainers wrap the model themselves).
        compile_codes: the kinds of code the door compiles in turn, each tried only where
            the one before failed (a LightningModule's whole step, then its forward passes).
        attention: a model runs eager attention that SDPA can replace
            (`accelkit.torch.tuning.attention.candidate`).
        float8: the GPU has float8 tensor cores, torchao imports and the model has
            eligible linear layers (`accelkit.torch.tuning.float8.trial_count`).
    """

    cuda: bool = True
    under_ddp: bool = False
    ddp_levers: bool = False
    compile_codes: int = 1
    attention: bool = False
    float8: bool = False


@dataclasses.dataclass(frozen=True)
class Entry:
    """One lever in the registry: `candidates` yields them; `most(scope)` is the most it
    yields in a run of `scope` (each costs one trial's units)."""

    candidates: Lever
    most: Callable[[Scope], int]


LEVERS: tuple[Entry, ...] = (
    # the optimizer's fused (or foreach) implementation
    Entry(optimizers.lever, lambda scope: 1),
    # DDP's options: bf16 gradients, larger buckets, a static graph, no buffer broadcast
    Entry(levers.lever, lambda scope: levers.CANDIDATES if scope.ddp_levers else 0),
    # SDPA for transformers models on eager attention
    Entry(attention.lever, lambda scope: int(scope.attention)),
    # torch.compile, of each kind of code in turn until one compiles
    Entry(compiling.compiled, lambda scope: scope.compile_codes),
    # its CUDA graphs
    Entry(compiling.graphed, lambda scope: int(scope.cuda and not scope.under_ddp)),
    # max-autotune
    Entry(compiling.autotuned, lambda scope: int(scope.cuda)),
    # float8 matmuls in the large linear layers, on the kept compiled step
    Entry(float8.lever, lambda scope: int(scope.float8)),
)


def candidates(engine: Engine) -> Iterator[Candidate | Skipped]:
    """The candidates of every lever, in `LEVERS`' order, each made when its turn comes."""
    for entry in LEVERS:
        yield from entry.candidates(engine)


def trial_units(scope: Scope) -> int:
    """The most units (optimizer steps) the trials of a run of `scope` take, more only
    where a failed candidate's batches are trained again: the baseline's units and each
    later candidate's, its rounds run twice (`trials.most_units`).

    Example:
        >>> trial_units(Scope(cuda=False)), trial_units(Scope(cuda=False, compile_codes=2))
        (42, 60)
        >>> trial_units(Scope(under_ddp=True))   # a trainer under DDP: no CUDA graphs
        60
    """
    later = sum(entry.most(scope) for entry in LEVERS)
    return trials.most_units(baseline=True) + later * trials.most_units(baseline=False)


def trial_steps(
    accumulation_steps: int,
    data_parallel: bool = False,
    cuda: bool = True,
    attention: bool = False,
    float8: bool = False,
) -> int:
    """The most training steps the fit's trials take (`trial_units`, `accumulation_steps`
    batches each): `data_parallel`: under the fit's DDP, whose options are candidates
    too; `cuda`, `attention`, `float8`: as `Scope`'s.

    Example:
        >>> trial_steps(1, cuda=False), trial_steps(1), trial_steps(2, data_parallel=True)
        (42, 78, 264)
        >>> trial_steps(1, attention=True), trial_steps(1, float8=True)
        (96, 96)
    """
    scope = Scope(
        cuda=cuda,
        under_ddp=data_parallel,
        ddp_levers=data_parallel,
        attention=attention,
        float8=float8,
    )
    return trial_units(scope) * accumulation_steps
