"""What stops a `tune` trial, and what a stopped one must leave as it found it.

A trial fails when its step raises (`Failed`, with `why` in one line) or when its
loss disagrees with the eager loss on the same batch (`checked`, `check_loss`:
the limits are `accelkit.torch.tuning.trials.LOSS_RTOL` and ``LOSS_ATOL``). The eager
reference step must not move BatchNorm statistics (`buffers_kept`); a step that
failed mid-way must not leave the gradient scaler waiting (`reset_scaler`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator
from typing import Any

from accelkit.torch.training.step import Step
from accelkit.torch.tuning import trials


class Failed(Exception):
    def __init__(self, error: BaseException, batches: list[Any]) -> None:
        super().__init__(str(error))
        self.error = error
        self.batches = batches
        self.why = why(error)


def why(error: BaseException) -> str:
    if "out of memory" in str(error).lower() or type(error).__name__ == "OutOfMemoryError":
        return "out of memory"
    if isinstance(error, LossMismatch):
        return str(error)
    # torch.compile's errors say where first and what on the next lines: keep a few.
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {' '.join(lines[:3])[:240]}"


class LossMismatch(ValueError):
    pass


def checked(step: Step, eager: float) -> Step:
    """`step` whose forward pass compares its loss with `eager` before returning it, so
    a loss that disagrees fails the step before its backward pass and optimizer step."""
    forward_loss = step.forward_loss

    def checking(batch: Any) -> Any:
        loss = forward_loss(batch)
        check_loss(float(loss.detach().float()), eager)
        return loss

    return dataclasses.replace(step, forward_loss=checking)


def check_loss(compiled: float, eager: float) -> None:
    if math.isfinite(eager) and not math.isfinite(compiled):
        raise LossMismatch(f"loss {compiled} where the eager loss was {eager:.6g}")
    rtol, atol = trials.LOSS_RTOL, trials.LOSS_ATOL
    if math.isfinite(eager) and abs(compiled - eager) > rtol * abs(eager) + atol:
        raise LossMismatch(
            f"loss {compiled:.6g} differs from the eager {eager:.6g} on the "
            f"same batch by more than {rtol:.0%} + {atol}"
        )


@contextlib.contextmanager
def buffers_kept(module: Any) -> Iterator[None]:
    """Put `module`'s buffers (BatchNorm statistics, counters) back as they were."""
    saved = [(buffer, buffer.detach().clone()) for buffer in module.buffers()]
    try:
        yield
    finally:
        for buffer, value in saved:
            buffer.data.copy_(value)


def reset_scaler(scaler: Any) -> None:
    """A step that failed between the scaler's ``unscale_`` and ``update`` leaves it
    waiting for ``update``, and the next ``unscale_`` would refuse; update it once."""
    with contextlib.suppress(Exception):  # nothing recorded since the last update: fine
        scaler.update()


def graph_breaks(torch: Any) -> int:
    try:
        from torch._dynamo.utils import counters

        # "graph_break" counts each break; newer releases count some under "unimplemented".
        return sum(int(sum(counters[key].values())) for key in ("graph_break", "unimplemented"))
    except Exception:  # noqa: BLE001 - a private counter: no count, no storm
        return 0
