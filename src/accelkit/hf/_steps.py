"""An optimizer step of a Hugging Face `Trainer`, measured on a `Meter`'s clock.

The Trainer tells its callbacks where a step begins and ends, but not its batches: the
micro-batches reach only ``model(**inputs)``. `TrainerSteps` registers a forward
pre-hook on the model that keeps the keyword arguments of each training-mode call made
while a step is open (the Trainer's batch dicts: ``input_ids``, ``attention_mask``,
``labels``), and closes the step on the meter's public clock with their samples and
tokens. Nothing here changes what the Trainer computes, nor runs the model more often
than the Trainer does: the first step's FLOPs are counted as that step trains (a
`flop_counter` from ``on_step_begin`` to ``on_step_end``: every micro-batch's forward,
loss and backward, under the Trainer's own autocast and ``compute_loss``), not in a
pass of their own. A later step whose batches have other shapes (dynamic padding,
length-grouped sampling) gets its own FLOPs: one sample of each new shape counted apart
from the step's time (`Meter.step_flops`).

A step that a break follows (the Trainer logs, evaluates, saves, or the epoch or the
training ends) is closed after a device synchronisation: the Trainer waits for that
step's queued work anyway (reading the loss, or in the evaluation), and the wait belongs
to the step, not to the break the hooks time after it.
"""

from __future__ import annotations

from typing import Any

from accelkit.profiling import torch_batches
from accelkit.profiling.flops_torch import counted, flop_counter


class TrainerSteps:
    """Opens and closes the meter's steps; one step is one optimizer step.

    Args:
        meter: the `accelkit.torch.Meter` whose clock, facts and FLOP count are used.
        fallback_samples: samples of a step whose batches were not seen (a model whose
            hooks do not run, e.g. under some compilers): per-device batch size x
            gradient accumulation.
        count_flops: count the first step's FLOPs as it trains. A first step that
            raises leaves the counter on until `detach` (the callback's ``with`` block
            ends, or the next ``train()`` begins).

    Attributes:
        samples, tokens: totals over all closed steps.
        flops: the counted FLOPs of one step (None until counted, or when not).

    Example:
        >>> import torch
        >>> from accelkit.torch.measuring.meter import Meter
        >>> model, meter = torch.nn.Linear(4, 2), Meter(warmup=0, window=1)
        >>> steps = TrainerSteps(meter, fallback_samples=8, count_flops=False)
        >>> steps.attach(model)
        >>> with meter:
        ...     for _ in range(3):   # the Trainer's optimizer steps: model(**inputs), backward
        ...         steps.begin()
        ...         model(input=torch.zeros(8, 4)).sum().backward()
        ...         steps.end()
        >>> steps.samples, meter.report().steps
        (24, 3)
    """

    def __init__(self, meter: Any, *, fallback_samples: int, count_flops: bool) -> None:
        self.meter = meter
        self.fallback_samples = fallback_samples
        self.samples = self.tokens = 0
        self.flops: int | None = None  # counted FLOPs of one step
        self._count = count_flops
        self._counter: Any = None  # counting the first step while it runs
        self._batches: list[dict[str, Any]] | None = None
        self._hook: Any = None
        self._count_again = False  # the next step's FLOPs counted again (`count_next`)

    def count_next(self) -> None:
        """Count the next step's FLOPs again (`Meter.count_again`): the step tune kept
        runs some matmuls in float8."""
        self._count_again = True

    def attach(self, model: Any) -> None:
        self._hook = model.register_forward_pre_hook(self._seen, with_kwargs=True)

    def detach(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        self._stop_counting()

    def _seen(self, module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        if self._batches is not None and module.training and not args:
            self._batches.append(dict(kwargs))

    def begin(self) -> None:
        self.meter.step_begin()
        self._batches = []
        if self._count and self.meter.clock.steps == 0:
            self._count = False
            self._start_counting()

    def end(self, *, synchronize: bool = False) -> None:
        """Close the open step (no-op when none is open); with `synchronize`, once the
        device has finished the step's queued work."""
        batches, self._batches = self._batches, None
        if batches is None:
            return
        if synchronize:
            self.meter.clock.synchronize()
        samples = sum(torch_batches.batch_size(b) or 0 for b in batches)
        tokens, real = 0, None if not batches else 0
        for batch in batches:
            ids = torch_batches.token_ids(batch)
            tokens += int(ids.numel()) if ids is not None else 0
            mask = torch_batches.attention_mask(batch, ids) if ids is not None else None
            real = None if mask is None or real is None else real + mask.sum()
        if not batches:
            samples = self.fallback_samples
            if self.meter.clock.steps == 0:
                self.meter.note(
                    "samples_per_second",
                    "the Trainer's batches were not seen "
                    "(no forward hook ran): samples from the batch size arguments",
                )
        if self.meter.clock.steps == 0:
            self._first(batches, samples)
        elif self._count_again and batches:
            self._count_again = False
            self.meter.count_again(batches)
        self.samples += samples
        self.tokens += tokens
        self.meter.last_batch_size = samples
        flops = self.meter.step_flops(batches) if batches else None
        real = real if tokens else None
        self.meter.step_done(samples=samples, tokens=tokens, real_tokens=real, flops=flops)

    def _first(self, batches: list[dict[str, Any]], samples: int) -> None:
        from accelkit.torch.measuring.facts import half_integer_inputs

        self.meter.facts.setdefault("batch_size", samples)
        found = half_integer_inputs(batches[0]) if batches else None
        if found:
            self.meter.facts.setdefault("half_integer_inputs", found)
        counter = self._stop_counting()
        if counter is None:
            return
        count = counted(counter, method=_METHOD)
        self.flops = count.total
        self.meter.set_flops(count, batches=batches)

    def _start_counting(self) -> None:
        try:
            counter = flop_counter()
            counter.__enter__()
        except Exception as error:  # noqa: BLE001 - counting is optional
            self.meter.note("flops_per_step", f"FLOP counting unavailable: {error}")
            return
        self._counter = counter

    def _stop_counting(self) -> Any:
        """The counter, stopped (None when none ran)."""
        counter, self._counter = self._counter, None
        if counter is not None:
            counter.__exit__(None, None, None)
        return counter


_METHOD = "torch FlopCounterMode on the first step (its micro-batches as the Trainer ran them)"
