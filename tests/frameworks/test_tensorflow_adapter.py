"""Applying plans to a real TensorFlow / Keras 3 on the CPU."""

from __future__ import annotations

import os

import numpy as np
import pytest

import accelkit
from accelkit.hardware.info import GpuInfo, HardwareInfo
from accelkit.keras import strategy as keras_strategy
from accelkit.planning import Request, Status, plan

pytestmark = pytest.mark.tensorflow

T4 = HardwareInfo(gpus=(GpuInfo(0, "Tesla T4", compute_capability=(7, 5)),), source="snapshot")
A100 = HardwareInfo(
    gpus=(GpuInfo(0, "NVIDIA A100-SXM4-80GB", compute_capability=(8, 0)),), source="snapshot"
)


@pytest.fixture(autouse=True)
def keras_state():
    import keras
    import tensorflow as tf

    policy = keras.mixed_precision.global_policy().name
    tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
    yield keras
    keras.mixed_precision.set_global_policy(policy)
    tf.config.experimental.enable_tensor_float_32_execution(tf32)


def small_model(keras, outputs: int = 3):
    inputs = keras.Input(shape=(8,))
    hidden = keras.layers.Dense(16, activation="relu")(inputs)
    return keras.Model(inputs, keras.layers.Dense(outputs)(hidden))


def test_t4_plan_sets_mixed_float16_and_a_model_trains_with_float32_outputs(keras_state) -> None:
    keras = keras_state
    result = accelkit.apply(plan(T4, Request(framework="tensorflow")))
    assert keras.mixed_precision.global_policy().name == "mixed_float16"
    assert result.get("keras.mixed_precision.global_policy").status is Status.APPLIED

    model = small_model(keras)
    assert model.layers[-1].compute_dtype == "float16"
    model = accelkit.keras.float32_head(model)
    assert model.output.dtype == "float32"
    model.compile(optimizer="adam", loss="mse")
    assert type(model.optimizer).__name__ == "LossScaleOptimizer"
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(64, 8)).astype("float32"), rng.normal(size=(64, 3)).astype("float32")
    history = model.fit(x, y, batch_size=16, epochs=3, verbose=0)
    losses = history.history["loss"]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert model.predict(x[:4], verbose=0).dtype == np.float32


def test_float32_head_leaves_float32_models_alone(keras_state) -> None:
    model = small_model(keras_state)
    assert accelkit.keras.float32_head(model) is model


def test_float32_head_wraps_subclassed_models(keras_state) -> None:
    keras = keras_state
    keras.mixed_precision.set_global_policy("mixed_float16")

    class Net(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(2)

        def call(self, x):
            return self.dense(x)

    net = Net()
    wrapped = accelkit.keras.float32_head(net)
    assert net(np.ones((1, 4), "float32")).dtype == "float16"
    assert wrapped(np.ones((1, 4), "float32")).dtype == "float32"


def test_user_set_policy_is_kept(keras_state) -> None:
    keras = keras_state
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    result = accelkit.apply(plan(T4, Request(framework="tensorflow")))
    assert keras.mixed_precision.global_policy().name == "mixed_bfloat16"
    setting = result.get("keras.mixed_precision.global_policy")
    assert setting.status is Status.KEPT_USER_VALUE and "mixed_bfloat16" in setting.detail


def test_applying_twice_is_idempotent(keras_state) -> None:
    accelkit.apply(plan(T4, Request(framework="tensorflow")))
    again = accelkit.apply(plan(T4, Request(framework="tensorflow")))
    assert again.get("keras.mixed_precision.global_policy").status is Status.ALREADY_SET


def test_fp32_plan_turns_tf32_off_and_default_plan_finds_it_on(keras_state) -> None:
    import tensorflow as tf

    auto = accelkit.apply(plan(A100, Request(framework="tensorflow")))
    key = "tf.config.experimental.enable_tensor_float_32_execution"
    assert auto.get(key).status is Status.ALREADY_SET  # TensorFlow's own default
    strict = accelkit.apply(plan(A100, Request(framework="tensorflow", precision="fp32")))
    assert strict.get(key).status is Status.APPLIED
    assert tf.config.experimental.tensor_float_32_execution_enabled() is False


def test_memory_growth_without_gpus_is_not_applicable(keras_state) -> None:
    result = accelkit.apply(plan(T4, Request(framework="tensorflow")))
    setting = result.get("tf.config.experimental.set_memory_growth")
    assert setting.status is Status.NOT_APPLICABLE and "no GPU" in setting.detail


def test_start_up_variable_after_tensorflow_started_says_too_late(keras_state) -> None:
    import tensorflow as tf

    tf.constant(1.0)  # TensorFlow has now created its devices and read its variables
    result = accelkit.apply(plan(T4, Request(framework="tensorflow")))
    setting = result.get("TF_GPU_THREAD_MODE")
    assert setting.status is Status.FAILED and "already started" in setting.detail
    assert "TF_GPU_THREAD_MODE" not in os.environ or os.environ["TF_GPU_THREAD_MODE"]
    # The run goes on: the policy was still applied.
    assert result.get("keras.mixed_precision.global_policy").status is Status.APPLIED


def test_a_variable_too_late_to_take_effect_is_not_left_behind(keras_state) -> None:
    # Left in os.environ it would read "already set" next time, and children inherit it.
    import tensorflow as tf

    tf.constant(1.0)
    for _ in range(2):
        result = accelkit.apply(plan(T4, Request(framework="tensorflow")))
        assert result.get("TF_GPU_THREAD_MODE").status is Status.FAILED
        assert "TF_GPU_THREAD_MODE" not in os.environ


def test_strategy_is_default_for_one_device(keras_state) -> None:
    import tensorflow as tf

    result = plan(T4, Request(framework="tensorflow"))
    assert keras_strategy(result) is tf.distribute.get_strategy()
