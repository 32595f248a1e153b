"""Every lever tune tries, in the order it tries them: one entry each.

A lever is a function ``lever(engine) -> Iterator[Candidate | Skipped]`` in the module of
its technique: it reads the run (the door's module, optimizer and device, the best so far,
the trials so far, the steps taken) and yields its candidates on top of the best so far,
or a `Skipped` record saying why it does not apply here. The engine asks for the next
candidate only when the last one's trial is over, so a lever sees what came before it
(max-autotune reads the compile kept). Each candidate is `Candidate`: its typed
`accelkit.profiling.levers.Settings`, how it is switched on and off, whether it is checked
against the eager step, and for DDP's bf16 gradients a verification after its steps.
docs/architecture.md says how to add one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from accelkit.torch.tuning import attention, compiling, float8, levers, optimizers
from accelkit.torch.tuning.candidate import Candidate, Skipped

if TYPE_CHECKING:
    from accelkit.torch.tuning.engine import Engine

Lever = Callable[["Engine"], Iterator[Candidate | Skipped]]

LEVERS: tuple[Lever, ...] = (
    optimizers.lever,  # the optimizer's fused (or foreach) implementation
    levers.lever,  # under DDP: bf16 gradients, larger buckets, a static graph, no broadcast
    attention.lever,  # SDPA for transformers models on eager attention
    compiling.compiled,  # torch.compile
    compiling.graphed,  # its CUDA graphs
    compiling.autotuned,  # max-autotune
    float8.lever,  # float8 matmuls in the large linear layers, on the kept compiled step
)


def candidates(engine: Engine) -> Iterator[Candidate | Skipped]:
    """The candidates of every lever, in `LEVERS`' order, each made when its turn comes."""
    for lever in LEVERS:
        yield from lever(engine)
