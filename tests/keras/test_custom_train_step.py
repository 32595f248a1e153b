"""A custom `train_step` under mixed_float16 (issue 22, items 2 and 3).

Keras wraps the optimizer in a `LossScaleOptimizer`, which divides the gradients by the
loss scale; a `train_step` that does not call ``self.optimizer.scale_loss`` trained on
gradients 32768 times too small. `ProfileCallback` (and so `accelkit.keras.fit`) applies
them as computed and says so. `accelkit.keras.fit` trains such a model with its own
`train_step`, not a float32-head wrapper that dropped it.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

import accelkit

from ..helpers.keras_models import global_policy_kept

pytestmark = pytest.mark.tensorflow
keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

CPU_PLAN = accelkit.plan_for(None, framework="tensorflow")
X, Y = np.ones((8, 1), "float32"), np.ones((8, 1), "float32")


@pytest.fixture(autouse=True)
def mixed_float16():
    with global_policy_kept():
        keras.mixed_precision.set_global_policy("mixed_float16")
        yield


class Tutorial(keras.Model):
    """A train_step as the keras-io tutorials write it; a float32 layer: only the
    scaling differs from a float32 run."""

    scale = False

    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(1, kernel_initializer="zeros", dtype="float32")

    def call(self, x):
        return self.dense(x)

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(self(x) - y))
            scaled = self.optimizer.scale_loss(loss) if self.scale else loss
        grads = tape.gradient(scaled, self.trainable_weights)
        self.optimizer.apply_gradients(zip(grads, self.trainable_weights, strict=True))
        return {"loss": loss, "mine": loss * 0 + 7}


class Scaling(Tutorial):
    scale = True


def _compiled(cls):
    keras.utils.set_random_seed(0)
    model = cls()
    model.compile(optimizer=keras.optimizers.SGD(0.1))
    assert type(model.optimizer).__name__ == "LossScaleOptimizer"
    return model


def _kernel(model) -> float:
    return float(model.dense.kernel.numpy().ravel()[0])


def test_an_unscaled_train_step_gets_its_gradients_as_computed(caplog) -> None:
    model = _compiled(Tutorial)
    callback = accelkit.keras.ProfileCallback(CPU_PLAN)
    with caplog.at_level(logging.WARNING, logger="accelkit"):
        model.fit(X, Y, epochs=1, batch_size=8, verbose=0, callbacks=[callback])
    assert _kernel(model) == pytest.approx(0.2)  # 6.1e-06 divided by the scale
    assert "scale_loss(loss) inside the GradientTape" in caplog.text
    facts = callback.report.to_dict()["facts"]["custom_train_step"]
    assert facts["scales_loss"] is False and facts["compensated"] is True
    assert "train_step" not in vars(model) and "apply" not in vars(model.optimizer)


def test_a_train_step_that_scales_its_loss_is_left_alone(caplog) -> None:
    model = _compiled(Scaling)
    with caplog.at_level(logging.WARNING, logger="accelkit"):
        model.fit(
            X,
            Y,
            epochs=1,
            batch_size=8,
            verbose=0,
            callbacks=[accelkit.keras.ProfileCallback(CPU_PLAN)],
        )
    assert _kernel(model) == pytest.approx(0.2)
    assert "scale_loss" not in caplog.text


def test_a_step_traced_before_accelkit_came_is_traced_again() -> None:
    model = _compiled(Tutorial)
    model.fit(X, Y, epochs=1, batch_size=8, verbose=0)  # Keras alone: divided
    assert abs(_kernel(model)) < 1e-4
    accelkit.keras.fit(model, X, Y, epochs=1, batch_size=8, verbose=0, plan=CPU_PLAN)
    assert _kernel(model) == pytest.approx(0.2, abs=1e-4)


@pytest.mark.parametrize("steps", [1, 3])
def test_the_scale_does_not_grow_on_compensated_steps(steps) -> None:
    model = _compiled(Tutorial)
    model.optimizer.dynamic_growth_steps = 2  # would double every other step
    model.compile(optimizer=model.optimizer, steps_per_execution=steps)
    model.fit(
        np.ones((48, 1), "float32"),
        np.ones((48, 1), "float32"),
        batch_size=8,
        verbose=0,
        callbacks=[accelkit.keras.ProfileCallback(CPU_PLAN)],
    )
    assert float(model.optimizer.dynamic_scale.numpy()) == 2.0**15
    assert model.optimizer.dynamic_growth_steps == 2


def test_fit_keeps_a_custom_train_step_of_a_model_without_call() -> None:
    class Parts(keras.Model):  # the VAE tutorial's shape: parts, a train_step, no call()
        def __init__(self):
            super().__init__()
            self.encoder = keras.layers.Dense(2)
            self.decoder = keras.layers.Dense(1, dtype="float32")
            self.encoder.build((None, 1))  # the tutorial's parts are built models
            self.decoder.build((None, 2))

        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(self.decoder(self.encoder(x)) - y))
                scaled = self.optimizer.scale_loss(loss)
            grads = tape.gradient(scaled, self.trainable_weights)
            self.optimizer.apply_gradients(zip(grads, self.trainable_weights, strict=True))
            return {"reconstruction": loss}

    model = Parts()
    model.compile(optimizer="adam")
    report = accelkit.keras.fit(model, X, Y, epochs=2, batch_size=4, verbose=0, plan=CPU_PLAN)
    assert report.trained_model is model and len(report.history["reconstruction"]) == 2
    assert "NotImplementedError" not in " ".join(report.notes.values())


def test_fit_keeps_a_custom_train_step_of_a_model_with_call() -> None:
    model = _compiled(Scaling)
    report = accelkit.keras.fit(model, X, Y, epochs=1, batch_size=8, verbose=0, plan=CPU_PLAN)
    assert report.trained_model is model and report.history["mine"] == [7.0]


def test_a_step_with_optimizers_of_its_own_gets_no_verdict() -> None:
    class GAN(Tutorial):  # the keras-io GAN: its own optimizers, self.optimizer unused
        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(self(x) - y))
            grads = tape.gradient(loss, self.trainable_weights)
            self.own.apply_gradients(zip(grads, self.trainable_weights, strict=True))
            return {"loss": loss}

    model = _compiled(GAN)
    model.own = keras.optimizers.SGD(0.1)  # not wrapped: divides nothing
    report = accelkit.keras.fit(model, X, Y, epochs=1, batch_size=8, verbose=0, plan=CPU_PLAN)
    assert _kernel(model) == pytest.approx(0.2)
    assert "unscaled_train_step" not in {a["id"] for a in report.advice}


@pytest.mark.parametrize(("cls", "warned"), [(Tutorial, True), (Scaling, False)])
def test_a_plain_fit_after_accelkit_set_mixed_float16_trains_right(cls, warned, caplog) -> None:
    # Regression (issue 22, 2): with the T4 plan applied and a plain model.fit, no
    # ProfileCallback, the tutorial's step trained on gradients divided by 32768 (6.1e-06).
    keras.mixed_precision.set_global_policy("float32")
    with caplog.at_level(logging.WARNING, logger="accelkit"):
        accelkit.apply(accelkit.plan_for("Tesla T4", framework="tensorflow"))
        assert keras.mixed_precision.global_policy().name == "mixed_float16"
        model = _compiled(cls)
        model.fit(X, Y, epochs=1, batch_size=8, verbose=0)
    assert _kernel(model) == pytest.approx(0.2)
    assert ("scale_loss(loss) inside the GradientTape" in caplog.text) is warned
