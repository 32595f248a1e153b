"""Issue 13, items 5 and 17: accelkit.keras.fit and ProfileCallback on real Keras 3 fits
(CPU): any steps_per_execution, fits that would train nothing, callbacks as Keras takes
them, a KeyboardInterrupt raised inside the data pipeline."""

from __future__ import annotations

import numpy as np
import pytest

import accelkit
from accelkit.hardware.info import HardwareInfo
from accelkit.planning import Request, plan

from ..helpers import keras_models
from ..helpers.keras_models import classification_data

pytestmark = pytest.mark.tensorflow
keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

CPU_PLAN = plan(HardwareInfo(source="snapshot"), Request(framework="tensorflow"))
# The shared MLP's training step on a batch of 32 (tests/helpers/keras_models.py).
FLOPS_32 = 2 * 32 * (16 * 64 + 64 * 4) * 2 + 2 * 32 * 64 * 4


@pytest.fixture(autouse=True)
def float32_policy():
    with keras_models.global_policy_kept():
        yield


def mlp(steps_per_execution: int = 1):
    model = keras_models.mlp()
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        steps_per_execution=steps_per_execution,
    )
    return model


def assert_consistent(report, optimizer_steps: int) -> None:
    """Steps are optimizer steps; samples are steps x 32; FLOP/s from those steps."""
    assert report.steps == optimizer_steps
    assert report.steady_steps == report.steps - report.warmup_steps > 0
    assert report.batch_size == 32
    assert report.samples_per_second == pytest.approx(
        32 * report.steady_steps / report.steady_seconds
    )
    assert report.flops_per_step == FLOPS_32
    assert report.achieved_tflops == pytest.approx(
        FLOPS_32 * report.steady_steps / report.steady_seconds / 1e12
    )


# 10 batches of 32 an epoch: 4 runs calls of 4, 4, 2 (Keras' shorter last call), 5 divides it.
@pytest.mark.parametrize("steps_per_execution", [1, 4, 5])
def test_any_steps_per_execution_counts_every_batch(steps_per_execution: int) -> None:
    x, y = classification_data(320)
    model = mlp(steps_per_execution)
    report = accelkit.keras.fit(model, x, y, batch_size=32, epochs=3, verbose=0, plan=CPU_PLAN)
    assert int(model.optimizer.iterations) == 30
    assert_consistent(report, 30)
    assert report.losses[-1] < report.losses[0]
    if steps_per_execution > 1:  # batches fetched inside Keras' loop: no wait to time
        assert (
            report.input_wait_share is None
            and "steps_per_execution" in report.notes["input_wait_share"]
        )


def test_profile_callback_counts_a_tf_data_fit_with_steps_per_execution() -> None:
    x, y = classification_data(352)  # 11 batches: calls of 3, 3, 3, 2
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
    model = mlp(3)
    callback = accelkit.keras.ProfileCallback(CPU_PLAN)
    model.fit(dataset, epochs=2, verbose=0, callbacks=[callback])
    assert int(model.optimizer.iterations) == 22
    assert_consistent(callback.report, 22)


@pytest.mark.parametrize("epochs", [0, -1, True, 1.5])
def test_a_fit_of_no_epochs_is_refused_before_training(epochs) -> None:
    x, y = classification_data(64)
    model = mlp()
    with pytest.raises(ValueError, match=r"epochs=.*>= 1"):
        accelkit.keras.fit(model, x, y, epochs=epochs, verbose=0, plan=CPU_PLAN)
    assert int(model.optimizer.iterations) == 0
    with pytest.raises(ValueError, match="initial_epoch=2"):
        accelkit.keras.fit(model, x, y, epochs=2, initial_epoch=2, verbose=0, plan=CPU_PLAN)


@pytest.mark.filterwarnings("ignore:Your input ran out of data")
@pytest.mark.parametrize("kind", ["arrays", "dataset"])
def test_data_that_yields_no_batch_is_a_clear_error(kind: str) -> None:
    x, y = classification_data(64)
    data = (
        (x[:0], y[:0])
        if kind == "arrays"
        else (tf.data.Dataset.from_tensor_slices((x, y)).take(0).batch(8), None)
    )
    with pytest.raises(ValueError, match="yielded no batch"):
        accelkit.keras.fit(mlp(), *data, epochs=1, verbose=0, plan=CPU_PLAN)


def test_one_callback_is_taken_as_keras_takes_it() -> None:
    class Counting(keras.callbacks.Callback):
        epochs = 0

        def on_epoch_end(self, epoch, logs=None):
            Counting.epochs += 1

    x, y = classification_data(64)
    report = accelkit.keras.fit(
        mlp(), x, y, epochs=2, verbose=0, plan=CPU_PLAN, callbacks=Counting()
    )
    assert Counting.epochs == 2 and report.steps == 4
    accelkit.keras.fit(
        mlp(),
        x,
        y,
        epochs=1,
        verbose=0,
        plan=CPU_PLAN,
        callbacks=keras.callbacks.CallbackList([Counting()]),
    )
    assert Counting.epochs == 3


class InterruptedAt(keras.utils.PyDataset):
    """8 batches of 32; reading batch `at` raises KeyboardInterrupt (a Ctrl-C there)."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at
        self.x, self.y = classification_data(256)

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int):
        if i == self.at:
            raise KeyboardInterrupt
        return self.x[32 * i : 32 * (i + 1)], self.y[32 * i : 32 * (i + 1)]


def test_a_keyboard_interrupt_in_a_py_dataset_leaves_a_partial_report() -> None:
    report = accelkit.keras.fit(mlp(), InterruptedAt(5), epochs=1, verbose=0, plan=CPU_PLAN)
    assert report.interrupted
    assert 1 <= report.steps <= 5  # TensorFlow may prefetch ahead of the steps


def test_a_keyboard_interrupt_in_a_generator_leaves_a_partial_report() -> None:
    x, y = classification_data(256)

    def batches():
        for i in range(8):
            if i == 5:
                raise KeyboardInterrupt
            yield x[32 * i : 32 * (i + 1)], y[32 * i : 32 * (i + 1)]

    report = accelkit.keras.fit(mlp(), batches(), epochs=1, verbose=0, plan=CPU_PLAN)
    assert report.interrupted and 1 <= report.steps <= 5


def test_other_pipeline_errors_still_propagate() -> None:
    class Failing(InterruptedAt):
        def __getitem__(self, i: int):
            if i == 2:
                raise OSError("disk gone")
            return super().__getitem__(i)

    with pytest.raises(Exception, match="disk gone") as raised:
        accelkit.keras.fit(mlp(), Failing(99), epochs=1, verbose=0, plan=CPU_PLAN)
    assert not isinstance(raised.value, KeyboardInterrupt)


def test_zero_samples_is_not_mistaken_for_np_empty() -> None:
    # A fit of one batch still trains and reports (the no-batch check counts steps only).
    x, y = classification_data(32)
    report = accelkit.keras.fit(
        mlp(), x, y, batch_size=32, epochs=1, verbose=0, plan=CPU_PLAN, warmup=0
    )
    assert report.steps == 1 and np.isfinite(report.losses[0])
