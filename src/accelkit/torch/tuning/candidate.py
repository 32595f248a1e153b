"""A candidate of tune's trials, and the record of a lever not tried: what every lever
makes (`accelkit.torch.tuning.registry`) and the engine runs (`accelkit.torch.tuning.engine`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from accelkit.profiling.levers import Settings
from accelkit.torch.tuning.trials import EXACT_ENOUGH, Tolerance


def _no() -> None:
    return None


def _fine() -> str | None:
    return None


@dataclasses.dataclass
class Candidate:
    """One set of settings to try, switched on and off in place between steps.

    Attributes:
        settings: what it trains with (its name is ``settings.name()`` unless `name`).
        on, off: switch it on and off (idempotent); off puts back what was before it.
        checked: its first batch is checked against the eager step (the door's `check`).
        tolerance: how far that check lets it lie from the eager step (a lever that
            computes in another precision has its own: float8's).
        stays: stays on when the trainer's training ends (`Engine.undo`): SDPA attention.
        verify: after its timed steps: why it computes something else, or None (DDP's
            bf16 gradients against fp32 ones).
        name: its trial's name where not its settings' (a failed start's record).
    """

    settings: Settings
    on: Callable[[], None] = _no
    off: Callable[[], None] = _no
    checked: bool = False
    tolerance: Tolerance = EXACT_ENOUGH
    stays: bool = False
    verify: Callable[[], str | None] = _fine
    name: str = ""

    def __post_init__(self) -> None:
        self.name = self.name or self.settings.name()


@dataclasses.dataclass(frozen=True)
class Skipped:
    """A lever not tried here, and why: a record of its own."""

    name: str
    why: str
    settings: Settings | None = None
    failed: bool = False  # it was tried and could not start (a compile that raised)
