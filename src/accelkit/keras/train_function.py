"""Counting a Keras fit's optimizer steps where Keras calls its train function.

One call of `model.train_function` runs `steps_per_execution` batches, fewer in
the last call of an epoch whose data runs out. Where the batches are Python
objects (the first call on TensorFlow, every call on JAX, `steps_per_execution=1`)
they are taken from the iterator here, timed (the input wait) and handed on
through the path Keras uses for Python iterators, so each is seen and counted.
Later calls on TensorFlow with `steps_per_execution > 1` run Keras' own compiled
loop untouched (taking its batches in Python would undo what the setting is
for); their batches are counted from the epoch's length and sized by the first
batch.

Each steady step whose batch is seen here gets its own FLOPs (`step_flops`: the
callback's count by shape, `accelkit.profiling.flops_shapes`); a step of Keras'
compiled loop gets none, so the run's FLOPs fall back to the first batch's count
(`unseen_steps` says how many such steps there were).

The first call after a break (validation, an epoch's boundary: the clock paused by
`accelkit.keras.ProfileCallback`) resumes the clock, so the time until this call is
the rest of the run, not training, and so is its first batch's wait (a new iterator).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import keras
import numpy as np

from accelkit.keras import batches
from accelkit.keras.policy_notes import add_policy_note
from accelkit.profiling.clock import StepClock
from accelkit.profiling.flop_count import StepFlops

Sizes = tuple[int | None, int]  # (samples, tokens) of one batch


def steps_per_execution(model: Any) -> int:
    """Batches one call of `model.train_function` runs (at most).

    Keras 3 keeps `steps_per_execution`; a Keras that tunes it (``"auto"``) keeps
    the current value in `_steps_per_execution`, read on every call.

    Example:
        >>> import keras
        >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        >>> model.compile(optimizer="adam", loss="mse", steps_per_execution=4)
        >>> steps_per_execution(model)
        4
    """
    value = getattr(model, "_steps_per_execution", None)
    if value is None:
        value = getattr(model, "steps_per_execution", 1)
    try:
        return max(1, int(np.asarray(value)))
    except (TypeError, ValueError):
        return 1


class StepCounter:
    """Replaces `model.train_function` with one that counts each batch it trains on.

    Args:
        model: the Keras model being fitted.
        clock: the clock that counts the steps (`Recorder.clock`); a call resumes it.
        tensorflow: the TensorFlow module on the TensorFlow backend, else None.
        tokens_per_sample: see `ProfileCallback`.
        first_batch: called once per fit with the first batch and its sample count.
        notes: where to say what could not be measured, by report field.
        step_flops: the FLOPs of a steady step on the batch it trained (each replica's
            share, as Keras hands it over); None: the run's one count stands for every step.

    Attributes:
        unseen_steps: steady steps that could have had their own FLOPs but whose batch
            stayed inside Keras' compiled loop (`steps_per_execution > 1` on tf.data).

    Example:
        >>> import keras
        >>> import numpy as np
        >>> import tensorflow as tf
        >>> from accelkit.profiling.clock import StepClock
        >>> clock = StepClock(None, warmup=0, window=2)
        >>> class Counting(keras.callbacks.Callback):   # as ProfileCallback uses it
        ...     def on_train_begin(self, logs=None):
        ...         self.counter = StepCounter(self.model, clock, tf, tokens_per_sample=None,
        ...                                    first_batch=lambda data, samples: None, notes={})
        ...         self.counter.wrap()
        ...     def on_epoch_begin(self, epoch, logs=None):
        ...         self.counter.epoch_begin(self.params["steps"])
        ...     def on_train_end(self, logs=None):
        ...         self.counter.restore()
        >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        >>> model.compile(optimizer="adam", loss="mse")
        >>> history = model.fit(np.zeros((64, 4)), np.zeros((64, 2)), epochs=2, verbose=0,
        ...                     callbacks=[Counting()])
        >>> clock.steps
        4
    """

    def __init__(
        self,
        model: Any,
        clock: StepClock,
        tensorflow: Any,
        *,
        tokens_per_sample: int | None,
        first_batch: Callable[[Any, int | None], None],
        notes: dict[str, str],
        step_flops: Callable[[Any], StepFlops | None] | None = None,
    ) -> None:
        self.model, self.clock, self._tf = model, clock, tensorflow
        self._tokens_per_sample = tokens_per_sample
        self._first_batch = first_batch
        self._notes = notes
        self._step_flops = step_flops
        self.unseen_steps = 0
        self._first: Sizes | None = None  # the first batch's sizes, once seen
        self._left: int | None = None  # batches left in this epoch, when Keras knows
        self._original: Any = None
        self.last_logs: Any = None

    def epoch_begin(self, steps: int | None) -> None:
        """An epoch of `steps` batches begins (None: its length is not known)."""
        self._left = steps or None

    def wrap(self) -> None:
        """Put the counting train function in place of the model's."""
        model = self.model
        original = self._original = model.train_function
        eager = bool(getattr(model, "run_eagerly", False))
        if eager:
            self._notes["input_wait_share"] = "not measured with run_eagerly=True"
            self._notes["samples_per_second"] = "batch sizes not seen with run_eagerly=True"
        elif keras.config.backend() == "torch":
            self._notes["input_wait_share"] = (
                "not measured on Keras' PyTorch backend: its "
                "trainer fetches the batch before the step"
            )
        stop = (
            (StopIteration,)
            if self._tf is None
            else (StopIteration, self._tf.errors.OutOfRangeError)
        )

        def counted(*args: Any) -> Any:
            try:
                return step(*args)
            except Exception as error:
                add_policy_note(error)  # a dtype error under a mixed policy: the fix
                raise

        def step(*args: Any) -> Any:
            self.clock.resume()  # a no-op unless paused (the epoch's end, validation)
            *head, source = args
            per_call = steps_per_execution(model)
            if eager or (self._first is not None and per_call > 1 and self._compiled_loop(source)):
                return self._whole_call(original, args, per_call)
            if not hasattr(source, "__next__"):  # PyTorch trainer: the batch, fetched already
                sizes = batches.sizes(source, self._tokens_per_sample)
                self._see_first(source, sizes)
                return self._counted(original(*args), [sizes], [source])
            start = time.perf_counter()
            data = []
            try:
                for _ in range(per_call):  # what came before StopIteration is kept
                    data.append(next(source))  # noqa: PERF401
            except stop:
                if not data:
                    raise StopIteration from None
            self.clock.fetched(time.perf_counter() - start)
            sizes_each = [batches.sizes(d, self._tokens_per_sample) for d in data]
            first_call = self._first is None
            self._see_first(data[0], sizes_each[0])
            # Keras' path for Python iterators: one step per batch given, as many as given.
            result = original(*head, iter(data))
            if first_call and per_call > 1 and self._compiled_loop(source) and self.clock.warmup:
                # Keras traces its compiled loop at the next call: keep that one in warm-up.
                self.clock.warmup = max(self.clock.warmup, self.clock.steps + len(data) + per_call)
            return self._counted(result, sizes_each, data)

        model.train_function = counted

    def restore(self) -> None:
        """Give the model its own train function back (idempotent)."""
        if self._original is not None:
            self.model.train_function = self._original
            self._original = None

    def _compiled_loop(self, source: Any) -> bool:
        """True where Keras runs its batches in a compiled loop (a tf.data iterator on
        the TensorFlow backend): the batches never reach Python."""
        tf = self._tf
        return tf is not None and isinstance(
            source, (tf.data.Iterator, tf.distribute.DistributedIterator)
        )

    def _see_first(self, data: Any, sizes: Sizes) -> None:
        if self._first is None:
            self._first = sizes
            self._first_batch(data, sizes[0])

    def _whole_call(self, original: Any, args: tuple[Any, ...], per_call: int) -> Any:
        """A call whose batches stay inside Keras: as many as it runs, each the first
        batch's size. Keras runs `per_call` batches, fewer when the epoch's data runs out
        first (its last call); `steps_per_epoch` shorter than the data makes Keras run
        whole calls, which is counted as the epoch's length."""
        self._notes.setdefault(
            "input_wait_share",
            (
                f"not measured with steps_per_execution={per_call}: Keras fetches those batches "
                "inside its compiled loop"
            ),
        )
        result = original(*args)
        batches_run = per_call if self._left is None else max(1, min(per_call, self._left))
        return self._counted(result, [self._first or (None, 0)] * batches_run)

    def _counted(self, result: Any, sizes_each: list[Sizes], data: list[Any] | None = None) -> Any:
        """Count the steps of one call: each batch's sizes and, where `data` holds the
        batches themselves, each steady step's own FLOPs."""
        self.last_logs = result
        clock, count = self.clock, len(sizes_each)
        if clock.steps < clock.warmup < clock.steps + count:
            # The batches of one call finish together: steady state starts between calls.
            clock.warmup = clock.steps + count
        for i, (samples, tokens) in enumerate(sizes_each):
            flops = self._flops(data[i] if data is not None else None)
            clock.step_done(samples=samples or 0, tokens=tokens, flops=flops)
        if self._left is not None:
            self._left -= count
        return result

    def _flops(self, batch: Any) -> StepFlops | None:
        """The next step's own FLOPs: None in warm-up, without `step_flops`, or where the
        batch was not seen (counted in `unseen_steps`)."""
        if self._step_flops is None or not self.clock.steady:
            return None
        if batch is None:
            self.unseen_steps += 1
            return None
        return self._step_flops(batch)
