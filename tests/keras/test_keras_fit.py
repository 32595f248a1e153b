"""accelkit.keras.fit, ProfileCallback and accelkit.fit on real Keras 3 / TensorFlow (CPU)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import accelkit
from accelkit.hardware.info import GpuInfo, HardwareInfo
from accelkit.planning import Request, plan

from ..helpers import keras_models
from ..helpers.keras_models import classification_data

pytestmark = pytest.mark.tensorflow
keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

CPU_PLAN = plan(HardwareInfo(source="snapshot"), Request(framework="tensorflow"))
T4_PLAN = plan(
    HardwareInfo(gpus=(GpuInfo(0, "Tesla T4", compute_capability=(7, 5)),)),
    Request(framework="tensorflow"),
)


class Boom(Exception):
    pass


@pytest.fixture(autouse=True)
def float32_policy():
    with keras_models.global_policy_kept():
        yield


def mlp():
    """The shared MLP (16 -> 64 -> 4), with accuracy among its metrics."""
    return keras_models.mlp(metrics=["accuracy"])


def test_fit_learns_and_reports_consistent_figures() -> None:
    x, y = classification_data()
    report = accelkit.keras.fit(mlp(), x, y, batch_size=32, epochs=3, verbose=0, plan=CPU_PLAN)
    # The report stands in for Keras' History (it was report.history.history before).
    assert report.history["loss"] == pytest.approx(report.losses)
    assert report.losses[-1] < 0.6 * report.losses[0]
    assert "accuracy" in report.history
    assert report.steps == 3 * 32 and report.warmup_steps == 3 and report.epochs == 3
    # Same MLP and batch as the PyTorch test: forward 2·B·(16·64 + 64·4), backward
    # both kernel gradients and the second layer's input gradient.
    assert report.flops_per_step == 2 * 32 * (16 * 64 + 64 * 4) * 2 + 2 * 32 * 64 * 4
    assert report.achieved_tflops == pytest.approx(
        report.flops_per_step * report.steady_steps / report.steady_seconds / 1e12
    )
    assert report.samples_per_second == pytest.approx(
        32 * report.steady_steps / report.steady_seconds
    )
    assert 0 <= report.input_wait_share < 1
    assert report.framework == "tensorflow" and report.device == "cpu"


def test_a_fit_from_initial_epoch_reports_the_epochs_it_trained() -> None:
    x, y = classification_data(320)  # D08: epochs=5 was reported, 2 were trained
    report = accelkit.keras.fit(
        mlp(), x, y, batch_size=32, initial_epoch=3, epochs=5, verbose=0, plan=CPU_PLAN
    )
    assert report.epoch == [3, 4] and report.steps == 20
    assert report.epochs == 2 and len(report.losses) == 2


def test_tf_data_input_and_tokens_per_sample() -> None:
    x, y = classification_data()
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).prefetch(2)
    report = accelkit.keras.fit(
        mlp(), dataset, epochs=2, verbose=0, plan=CPU_PLAN, tokens_per_sample=16
    )
    assert report.steps == 2 * 16
    assert report.tokens_per_second == pytest.approx(report.samples_per_second * 16)


def test_a_slow_input_pipeline_shows_as_input_wait() -> None:
    x, y = classification_data(256)

    def slow(xb, yb):
        return tf.py_function(lambda a: (__import__("time").sleep(0.2), a)[1], [xb], tf.float32), yb

    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).map(slow)
    dataset = dataset.map(lambda a, b: (tf.ensure_shape(a, (None, 16)), b))
    report = accelkit.keras.fit(mlp(), dataset, epochs=2, verbose=0, plan=CPU_PLAN, warmup=1)
    # 200 ms of loading against a step of a few ms (tens on a loaded 2-core machine: at
    # 50 ms the share fell to 0.39 there); Keras' own per-step work is the rest.
    assert report.input_wait_share > 0.4


def test_mixed_policy_model_gets_a_float32_head_and_still_learns() -> None:
    accelkit.apply(T4_PLAN)
    assert keras.mixed_precision.global_policy().name == "mixed_float16"
    model = mlp()
    assert model.outputs[0].dtype == "float16"
    x, y = classification_data()
    with pytest.warns(UserWarning, match="float32"):
        report = accelkit.keras.fit(model, x, y, batch_size=32, epochs=3, verbose=0, plan=T4_PLAN)
    assert "float32 output head" in report.notes["model"]
    assert report.losses[-1] < report.losses[0]
    assert report.precision == "fp16"


def test_profile_callback_in_a_plain_model_fit() -> None:
    x, y = classification_data()
    callback = accelkit.keras.ProfileCallback(CPU_PLAN)
    model = mlp()
    model.fit(x, y, batch_size=128, epochs=2, verbose=0, callbacks=[callback])
    assert callback.report.steps == 16 and callback.report.flops_per_step > 0
    # The wrapped train function is put back afterwards.
    model.fit(x, y, batch_size=128, epochs=1, verbose=0)


def test_user_errors_propagate_unchanged() -> None:
    class Failing(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 3:
                raise Boom("from the user's callback")

    x, y = classification_data()
    with pytest.raises(Boom, match="user's callback"):
        accelkit.keras.fit(
            mlp(), x, y, batch_size=32, verbose=0, plan=CPU_PLAN, callbacks=[Failing()]
        )
    assert not [t for t in threading.enumerate() if t.name == "accelkit-nvml"]


def test_keyboard_interrupt_leaves_a_partial_report() -> None:
    class Interrupt(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 9:
                raise KeyboardInterrupt

    x, y = classification_data()
    report = accelkit.keras.fit(
        mlp(), x, y, batch_size=32, verbose=0, plan=CPU_PLAN, callbacks=[Interrupt()]
    )
    assert report.interrupted and report.steps == 10


def test_uncompiled_model_is_a_clear_error() -> None:
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    with pytest.raises(ValueError, match="compile"):
        accelkit.keras.fit(model, np.zeros((8, 4)), np.zeros((8, 2)), plan=CPU_PLAN)


def test_accelkit_fit_dispatches_on_the_model() -> None:
    x, y = classification_data()
    report = accelkit.fit(mlp(), x, y=y, batch_size=64, epochs=1, verbose=0, plan=CPU_PLAN)
    assert report.framework == "tensorflow"
    with pytest.raises(TypeError, match=r"torch\.nn\.Module or a keras\.Model"):
        accelkit.fit(object(), x)


def test_accelkit_fit_takes_the_frameworks_positional_arguments() -> None:
    x, y = classification_data()
    report = accelkit.fit(mlp(), x, y, 64, 2, verbose=0, plan=CPU_PLAN)  # x, y, batch_size, epochs
    assert report.epoch == [0, 1] and report.params["epochs"] == 2
    with pytest.raises(TypeError, match=r"accelkit\.keras\.fit.*multiple values for argument 'y'"):
        accelkit.fit(mlp(), x, y, y=y, plan=CPU_PLAN)


def test_the_report_is_a_drop_in_for_history(tmp_path) -> None:
    x, y = classification_data()
    expected = mlp().fit(x, y, batch_size=32, epochs=2, verbose=0)  # the same calls on History
    model = mlp()
    history = accelkit.keras.fit(model, x, y, batch_size=32, epochs=2, verbose=0, plan=CPU_PLAN)
    # The same keys as model.fit's History, plus accelkit's figures (docs/integrations.md).
    ours = [key for key in history.history if not key.startswith("accelkit_")]
    assert sorted(ours) == sorted(expected.history)
    assert history.epoch == expected.epoch == [0, 1]
    assert history.params == expected.params
    assert history.trained_model is model
    history.save(tmp_path / "run.json")  # plain data: saved with the report
    assert accelkit.RunReport.load(tmp_path / "run.json").history == history.history


def test_apply_makes_the_plan_current_and_the_report_says_what_ran() -> None:
    # A T4 plan applied on the CPU sets mixed_float16: the fits follow the applied plan
    # (no re-planning for this machine, no policy reset) and report fp16.
    applied = accelkit.apply(T4_PLAN)
    assert accelkit.current_plan() is applied
    assert keras.mixed_precision.global_policy().name == "mixed_float16"
    x, y = classification_data()
    report = accelkit.keras.fit(mlp(), x, y, batch_size=32, epochs=1, verbose=0)
    assert report.precision == "fp16" and report.matmul_dtype == "fp16"
    assert keras.mixed_precision.global_policy().name == "mixed_float16"
    assert report.trained_model.output.dtype == "float32"  # the head was added
    callback = accelkit.keras.ProfileCallback()  # the user's own model.fit
    mlp().fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[callback])
    assert callback.report.precision == "fp16"


def test_the_report_says_what_ran_when_the_model_disagrees_with_the_plan() -> None:
    keras.mixed_precision.set_global_policy("mixed_float16")
    model = mlp()  # built under mixed_float16
    keras.mixed_precision.set_global_policy("float32")
    x, y = classification_data()
    callback = accelkit.keras.ProfileCallback(CPU_PLAN)
    model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[callback])
    assert CPU_PLAN.precision.value == "fp32"
    assert callback.report.precision == "fp16"
    assert "layers computed in fp16" in callback.report.notes["precision"]


def test_the_callback_leaves_keras_async_dispatch_alone() -> None:
    # A callback with a per-batch hook makes Keras turn every step's logs into Python
    # numbers, waiting for the device each step (keras.callbacks.CallbackList); the
    # callback counts steps in the train function instead, and has no such hook.
    for hook in ("on_batch_end", "on_train_batch_end", "on_train_batch_begin"):
        assert getattr(accelkit.keras.ProfileCallback, hook) is getattr(
            keras.callbacks.Callback, hook
        )
