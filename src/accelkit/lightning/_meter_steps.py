"""A `Meter` step opened in one Lightning hook and closed in another.

`Meter.step` is a context manager; Lightning hands the step's start and end to two
callbacks (`on_train_batch_start`, `on_train_batch_end`). `OpenStep` enters the
meter's own context manager in the first and leaves it in the second, so the step is
measured exactly as in a hand-written loop (samples, tokens, the gap before it as input
wait, the nested-step guard, a manual-optimization step's FLOPs counted as it runs),
through the meter's public API only.
"""

from __future__ import annotations

from typing import Any


class OpenStep:
    """At most one measured step at a time.

    Example:
        >>> import torch
        >>> from accelkit.torch.measuring.meter import Meter
        >>> meter = Meter(warmup=0, window=1)
        >>> steps = OpenStep(meter)
        >>> with meter:
        ...     for batch in [torch.zeros(8, 4)] * 3:
        ...         steps.begin(batch)      # on_train_batch_start
        ...         steps.end()             # on_train_batch_end
        >>> meter.report().steps
        3
    """

    def __init__(self, meter: Any) -> None:
        self.meter = meter
        self._open: Any = None

    def begin(self, batch: Any) -> None:
        if self._open is not None:  # a step whose end never came (an exception Lightning caught)
            self.end()
        self._open = self.meter.step(batch)
        self._open.__enter__()

    def end(self) -> None:
        if self._open is None:
            return
        step, self._open = self._open, None
        step.__exit__(None, None, None)

    def abandon(self, error: BaseException) -> None:
        """Close an open step with the user's error: the meter forgets it, nothing is counted."""
        step, self._open = self._open, None
        if step is not None:  # returns False: the caller (Lightning) raises the error
            step.__exit__(type(error), error, error.__traceback__)
