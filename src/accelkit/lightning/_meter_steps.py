"""A `Meter` step opened in one Lightning hook and closed in another.

`Meter.step` is a context manager; Lightning hands the step's start and end to two
callbacks (`on_train_batch_start`, `on_train_batch_end`). `OpenStep` enters the
meter's own context manager in the first and leaves it in the second, so the step is
measured exactly as in a hand-written loop (samples, tokens, the nested-step guard),
through the meter's public API only.
"""

from __future__ import annotations

import time
from typing import Any

from accelkit.profiling import torch_batches


class OpenStep:
    """At most one measured step at a time, plus what the window figures need.

    Attributes:
        tokens: token positions of the last batch (0 when it has no token ids).
        input_wait_s: seconds between steps since `take_wait` last read it.

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
        self.tokens = 0
        self.input_wait_s = 0.0
        self._open: Any = None
        self._last_end: float | None = None

    def begin(self, batch: Any) -> None:
        if self._open is not None:  # a step whose end never came (an exception Lightning caught)
            self.end()
        now = time.perf_counter()
        if self._last_end is not None:
            self.input_wait_s += now - self._last_end
        size, ids = torch_batches.sizes(batch)
        tokens_per_sample = self.meter.tokens_per_sample
        self.tokens = (
            size * tokens_per_sample
            if tokens_per_sample and size
            else int(ids.numel())
            if ids is not None
            else 0
        )
        self._open = self.meter.step(batch)
        self._open.__enter__()

    def end(self) -> None:
        if self._open is None:
            return
        step, self._open = self._open, None
        step.__exit__(None, None, None)
        self._last_end = time.perf_counter()

    def abandon(self, error: BaseException) -> None:
        """Close an open step with the user's error: the meter forgets it, nothing is counted."""
        step, self._open = self._open, None
        if step is not None:  # returns False: the caller (Lightning) raises the error
            step.__exit__(type(error), error, error.__traceback__)

    def take_wait(self) -> float:
        wait, self.input_wait_s = self.input_wait_s, 0.0
        return wait

    def gpu_since(self, start: float) -> Any:
        """NVML figures since `start` (a perf_counter time), or None without GPU samples.

        Reads the meter's sampler, which `Meter` does not expose yet; the one place that
        does, until it gets a public accessor."""
        sampler = getattr(self.meter, "_sampler", None)
        if sampler is None or not sampler.devices:
            return None
        return sampler.summary(start, None)
