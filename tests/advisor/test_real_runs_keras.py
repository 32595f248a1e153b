"""The advisor on real Keras 3 / TensorFlow runs on this CPU, each built so its
condition is true, and on a healthy run where no rule may warn."""

from __future__ import annotations

import time

import pytest

import accelkit
from accelkit.advisor import Severity
from accelkit.hardware.info import HardwareInfo
from accelkit.planning import Request, plan

from ..helpers.keras_models import classification_data, global_policy_kept

pytestmark = pytest.mark.tensorflow
keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

CPU_PLAN = plan(HardwareInfo(source="snapshot"), Request(framework="tensorflow"))


@pytest.fixture(autouse=True)
def float32_policy():
    with global_policy_kept():
        yield


def data(n: int = 1024):
    return classification_data(n, dim=64, classes=8)


def mlp(dim: int = 64, hidden: int = 512, classes: int = 8, head=None):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((dim,))
    h = keras.layers.Dense(hidden, activation="relu", name="wide")(inputs)
    h = keras.layers.Dense(256, activation="relu", name="mid")(h)
    model = keras.Model(inputs, keras.layers.Dense(classes, name="head")(h))
    model = head(model) if head else model
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def fit(model, x, y=None, **kwargs):
    kwargs.setdefault("plan", CPU_PLAN)
    return accelkit.keras.fit(model, x, y, verbose=0, **kwargs)


def verdicts(report):
    return {a["id"]: a for a in report.advice}


def test_healthy_run_gets_no_warning() -> None:
    x, y = data()
    dataset = (
        tf.data.Dataset.from_tensor_slices((x, y)).batch(64).cache().prefetch(tf.data.AUTOTUNE)
    )
    report = fit(mlp(), dataset, epochs=2)
    assert [a for a in report.advice if a["severity"] != "info"] == []
    assert "alignment" not in verdicts(report) and "keras_policy" not in verdicts(report)
    facts = report.facts
    assert facts["loader"] == {
        "type": "tf.data.Dataset",
        "prefetch": True,
        "cache": True,
        "map": 0,
        "parallel_map": 0,
        "interleave": False,
    }
    assert facts["batch_size"] == 64 and facts["steps_per_epoch"] == 16
    assert facts["devices_used"] == 1 and facts["keras_policy"] == "float32"
    assert facts["layers"][0] == {
        "name": "wide",
        "type": "Dense",
        "dims": {"in_features": 64, "out_features": 512},
    }


def test_a_slow_tf_data_map_is_input_bound_with_the_tf_data_fix() -> None:
    x, y = data(256)

    def slow(xb, yb):
        return tf.py_function(lambda a: (time.sleep(0.03), a)[1], [xb], tf.float32), yb

    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).map(slow)
    dataset = dataset.map(lambda a, b: (tf.ensure_shape(a, (None, 64)), b))
    report = fit(mlp(), dataset, epochs=2, warmup=1)
    top = report.advice[0]
    assert top["id"] == "input_bound" and top["severity"] == "warning"
    assert top["evidence"]["loader.map"] == 2 and top["evidence"]["loader.prefetch"] is False
    assert "num_parallel_calls=tf.data.AUTOTUNE" in top["action"]
    assert ".prefetch(tf.data.AUTOTUNE)" in top["action"]
    # At most one parallel map call per core, overlapping the step: cores + 1.
    cap = (report.hardware.get("cpu_count") or 2) + 1
    assert top["speedup"] == pytest.approx(min(1 / (1 - report.input_wait_share), cap))
    assert f"at most {cap:.2f}x" in top["expected_gain"]


def test_a_dense_layer_of_1001_units_gets_alignment_advice_naming_it() -> None:
    x, y = data(256)
    report = fit(mlp(hidden=1001), x, y, batch_size=32, epochs=1)
    found = verdicts(report)["alignment"]
    assert found["evidence"]["misaligned"] == [
        "wide (Dense out_features=1001)",
        "mid (Dense in_features=1001)",
    ]
    assert "keras.layers.Dense" in found["action"] and "1001 -> 1008" in found["action"]


def test_a_model_built_before_the_mixed_policy_is_named() -> None:
    x, y = data(256)
    model = mlp()  # built under float32
    keras.mixed_precision.set_global_policy("mixed_float16")
    report = fit(model, x, y, batch_size=32, epochs=1)
    found = verdicts(report)["keras_policy"]
    assert found["severity"] == "warning"
    assert found["evidence"]["off_policy_layers"] == [
        "wide (Dense, float32)",
        "mid (Dense, float32)",
    ]
    assert "before building the model" in found["action"]


def test_a_model_built_under_the_policy_is_not_named() -> None:
    keras.mixed_precision.set_global_policy("mixed_float16")
    x, y = data(256)
    report = fit(mlp(head=accelkit.keras.float32_head), x, y, batch_size=32, epochs=1)
    assert report.facts["keras_layers_off_policy"] == []
    assert "keras_policy" not in verdicts(report)


def test_fp16_overflow_collapses_the_loss_scale() -> None:
    """mixed_float16 with inputs of 1e6: activations overflow fp16 on every step, so
    Keras' LossScaleOptimizer skips each step and halves its scale."""
    keras.mixed_precision.set_global_policy("mixed_float16")
    x, y = data(256)
    model = mlp(head=accelkit.keras.float32_head)
    assert type(model.optimizer).__name__ == "LossScaleOptimizer"
    report = fit(model, x * 1e6, y, batch_size=32, epochs=2)
    scale = report.facts["loss_scale"]
    assert scale["initial"] == 32768.0 and scale["history"][-1][1] < 1
    found = verdicts(report)
    assert found["loss_scale"]["severity"] == Severity.CRITICAL.value
    assert found["nonfinite_loss"]["severity"] == "critical"
    assert "global_clipnorm" in found["loss_scale"]["action"]
