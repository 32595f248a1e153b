"""Keras 3 `fit` under MultiWorkerMirroredStrategy, for the length of one fit.

Keras 3's TensorFlow trainer cannot fit under a multi-worker strategy
(keras-team/keras#20585, tensorflow/tensorflow#72388), in two places:

- before the first step it reduces the whole first batch, a nest of `PerReplica`
  values, with one `strategy.reduce` call, which takes a single value
  ("Attempt to convert a value (PerReplica...) to a Tensor");
- after each step it averages the scalar logs with `strategy.reduce("MEAN", v,
  axis=0)`, and a scalar has no axis 0 ("Invalid reduction dimension 0").

`multi_worker_fit(model)` fixes both on this model only, while the fit runs:
the first batch's shapes come from this worker's first replica (the build needs
shapes, not values), and each log is averaged across all replicas with
`axis=None`, as the single-worker path does. The train step itself, the
gradients' all-reduce and the optimizer are Keras' own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import keras
import tensorflow as tf

NOTE = (
    "Keras 3 cannot fit under MultiWorkerMirroredStrategy (keras-team/keras#20585): "
    "accelkit built the model from this worker's first batch and averaged each step's "
    "logs across all replicas; the train step is Keras' own"
)

_OVERRIDES = ("_maybe_symbolic_build", "make_train_function", "make_test_function")


@contextlib.contextmanager
def multi_worker_fit(model: Any) -> Iterator[None]:
    """While the block runs, `model.fit` and `model.evaluate` work under the model's
    MultiWorkerMirroredStrategy; the model is left as it was afterwards."""
    strategy = model.distribute_strategy

    def maybe_symbolic_build(iterator: Any = None, data_batch: Any = None) -> None:
        if iterator is not None:
            for _, _, batches in iterator:
                data_batch = tf.nest.map_structure(_first_local, next(batches))
                break
        with strategy.scope():
            model._symbolic_build(data_batch=data_batch)

    def make_train_function(force: bool = False) -> Any:
        if model.train_function is None or force:
            model.train_function = _step_function(model, model.train_step)
        return model.train_function

    def make_test_function(force: bool = False) -> Any:
        if model.test_function is None or force:
            model.test_function = _step_function(model, model.test_step)
        return model.test_function

    saved = (model.train_function, model.test_function)
    model.train_function = model.test_function = None
    model._maybe_symbolic_build = maybe_symbolic_build
    model.make_train_function = make_train_function
    model.make_test_function = make_test_function
    try:
        yield
    finally:
        for name in _OVERRIDES:
            model.__dict__.pop(name, None)
        # Functions built here hold the fixed reduction; Keras rebuilds its own later.
        model.train_function, model.test_function = saved


def _first_local(value: Any) -> Any:
    if isinstance(value, tf.distribute.DistributedValues):
        return value.values[0]
    return value


def _step_function(model: Any, step: Any) -> Any:
    """Keras' one-step function for Python and distributed iterators, with logs
    averaged over all replicas of all workers."""
    strategy = model.distribute_strategy

    def one_step(data: Any) -> Any:
        outputs = strategy.run(step, args=(data,))
        return keras.tree.map_structure(
            lambda value: strategy.reduce("MEAN", value, axis=None), outputs
        )

    if not model.run_eagerly:
        one_step = tf.function(one_step, reduce_retracing=True, jit_compile=model.jit_compile)

    def function(iterator: Any) -> Any:
        outputs = None
        for _ in range(max(int(model.steps_per_execution), 1)):
            try:
                data = next(iterator)
            except (StopIteration, tf.errors.OutOfRangeError):
                if outputs is None:
                    raise StopIteration from None
                break
            outputs = one_step(data)
        return outputs

    return function
