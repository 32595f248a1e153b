"""Line one must not break a tutorial silently (issue 22, item 5): setting a mixed policy
says what it changes and how to opt out, and a dtype error passing through accelkit
under it gets a note (PEP 678) naming the policy and the fix, its type and message kept."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import accelkit
from accelkit.frameworks import tensorflow_adapter

from ..helpers.keras_models import global_policy_kept

pytestmark = pytest.mark.tensorflow
keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

CPU_PLAN = accelkit.plan_for(None, framework="tensorflow")
T4_PLAN = accelkit.plan_for("Tesla T4", framework="tensorflow")


@pytest.fixture(autouse=True)
def policy_kept():
    with global_policy_kept():
        yield


class Sampling(keras.layers.Layer):
    """The keras-io VAE's sampling layer: its noise is float32 whatever the policy."""

    def call(self, inputs):
        z_mean, z_log_var = inputs
        return z_mean + tf.exp(0.5 * z_log_var) * tf.random.normal(tf.shape(z_mean))


class Sampler(keras.Model):
    def __init__(self):
        super().__init__()
        self.mean, self.log_var = keras.layers.Dense(2), keras.layers.Dense(2)
        self.out = keras.layers.Dense(1, dtype="float32")

    def call(self, x):
        return self.out(Sampling()([self.mean(x), self.log_var(x)]))


def _data():
    return np.ones((8, 4), "float32"), np.ones((8, 1), "float32")


def test_setting_a_mixed_policy_says_what_it_changes_once(caplog, monkeypatch) -> None:
    monkeypatch.setattr(tensorflow_adapter, "_announced", set())
    keras.mixed_precision.set_global_policy("float32")
    with caplog.at_level(logging.INFO, logger="accelkit"):
        accelkit.apply(T4_PLAN)
        keras.mixed_precision.set_global_policy("float32")
        accelkit.apply(T4_PLAN)
    said = [r.getMessage() for r in caplog.records if "layers built from now on" in r.getMessage()]
    assert len(said) == 1
    assert "scale_loss" in said[0] and "precision='fp32'" in said[0]
    assert "ACCELKIT_PRECISION=fp32" in said[0]


@pytest.mark.parametrize("door", ["fit", "callback"])
def test_a_dtype_error_under_the_policy_gets_a_note_with_the_fix(door) -> None:
    keras.mixed_precision.set_global_policy("mixed_float16")
    model = Sampler()
    model.compile(optimizer="adam", loss="mse")
    callback = accelkit.keras.ProfileCallback(CPU_PLAN)
    train = (
        (lambda: accelkit.keras.fit(model, *_data(), verbose=0, plan=CPU_PLAN))
        if door == "fit"
        else (lambda: model.fit(*_data(), verbose=0, callbacks=[callback]))
    )
    with pytest.raises(TypeError, match="float16") as raised:
        train()
    (note,) = raised.value.__notes__
    assert "mixed_float16" in note and "dtype=z.dtype" in note and "precision='fp32'" in note


def test_other_errors_get_no_note() -> None:
    keras.mixed_precision.set_global_policy("mixed_float16")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, dtype="float32")])
    model.compile(optimizer="adam", loss="mse")
    with pytest.raises(ValueError, match="shape") as raised:
        accelkit.keras.fit(
            model, np.ones((8, 3), "float32"), np.ones((8, 1)), verbose=0, plan=CPU_PLAN
        )
    assert not getattr(raised.value, "__notes__", None)


def test_the_note_is_added_on_python_without_add_note() -> None:
    class Old(TypeError):  # as on Python 3.10: no add_note
        add_note = None

    from accelkit.keras.policy_notes import add_note

    error = Old("x")
    add_note(error, "first")
    add_note(error, "second")
    assert error.__notes__ == ["first", "second"]
