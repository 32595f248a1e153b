"""Verdicts that name the cause under a Keras mixed policy (issue 22, item 6): a float16
overflow in the loss's reduction, a subclassed model's float16 outputs, a custom
train_step that does not scale its loss (measured, and on a T4 what-if of a float32 run),
and a model without call() in the FLOP note."""

from __future__ import annotations

import numpy as np
import pytest

import accelkit
from accelkit.advisor import Context, Severity
from accelkit.advisor.rules import stability, train_step

from ..helpers.keras_models import global_policy_kept

CPU_PLAN = accelkit.plan_for(None, framework="tensorflow")
T4_PLAN = accelkit.plan_for("Tesla T4", framework="tensorflow")


@pytest.fixture
def keras():
    keras = pytest.importorskip("keras")
    pytest.importorskip("tensorflow")
    with global_policy_kept():
        yield keras


def _advice(report) -> dict[str, dict]:
    return {a["id"]: a for a in report.advice}


def _summing_model(keras, tf):
    class Summing(keras.Model):
        """A VAE-like reconstruction loss: a sum over the batch, in the output's float16."""

        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(256, kernel_initializer="ones")
            self.tracker = keras.metrics.Mean(name="loss")  # the VAE tutorial's trackers

        @property
        def metrics(self):
            return [self.tracker]

        def call(self, x):
            return self.dense(x)

        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                predicted = self(x)  # float16: 32 x 256 squares of 4 sum past 65504
                loss = tf.reduce_sum(tf.square(predicted - tf.cast(y, predicted.dtype)))
                scaled = self.optimizer.scale_loss(loss)
            grads = tape.gradient(scaled, self.trainable_weights)
            self.optimizer.apply_gradients(zip(grads, self.trainable_weights, strict=True))
            self.tracker.update_state(loss)
            return {"loss": self.tracker.result()}

    return Summing()


@pytest.mark.tensorflow
def test_a_float16_reduction_overflow_is_named_not_a_dead_model(keras) -> None:
    import tensorflow as tf

    keras.mixed_precision.set_global_policy("mixed_float16")
    model = _summing_model(keras, tf)
    model.compile(optimizer=keras.optimizers.SGD(1e-9))
    x, y = np.ones((640, 4), "float32"), np.zeros((640, 256), "float32")
    report = accelkit.keras.fit(model, x, y, batch_size=32, epochs=2, verbose=0, plan=CPU_PLAN)
    assert not np.isfinite(report.history["loss"]).any()
    verdict = _advice(report)["nonfinite_loss"]
    assert "overflow in the loss's reduction" in verdict["title"]
    assert "not training" not in verdict["title"] and verdict["severity"] == "warning"
    assert report.to_dict()["facts"]["weights_finite"] is True


def test_non_finite_weights_keep_the_critical_verdict() -> None:
    measured = {
        "losses": [1.0, float("nan")],
        "precision": "bf16",
        "facts": {"weights_finite": False, "keras_policy": "mixed_bfloat16"},
    }
    advice = stability.nonfinite_loss(Context.build(None, None, measured))
    assert advice.severity is Severity.CRITICAL and "not training" in advice.title


def test_a_collapsed_loss_scale_is_not_taken_for_a_reduction_overflow() -> None:
    facts = {
        "weights_finite": True,
        "keras_policy": "mixed_float16",
        "loss_scale": {"initial": 32768.0, "history": [[10, 0.5]]},
    }
    advice = stability.nonfinite_loss(
        Context.build(None, None, {"losses": [float("inf")], "precision": "fp16", "facts": facts})
    )
    assert advice.severity is Severity.CRITICAL


@pytest.mark.tensorflow
def test_a_subclassed_models_float16_outputs_are_found_at_the_first_batch(keras) -> None:
    keras.mixed_precision.set_global_policy("mixed_float16")

    class Net(keras.Model):
        def __init__(self):
            super().__init__(name="net")
            self.dense = keras.layers.Dense(1, activation="sigmoid")

        def call(self, x):
            return self.dense(x)

    model = Net()
    model.compile(optimizer="adam", loss="binary_crossentropy")
    callback = accelkit.keras.ProfileCallback(CPU_PLAN)
    model.fit(np.ones((32, 3), "float32"), np.zeros((32, 1)), verbose=0, callbacks=[callback])
    verdict = _advice(callback.report)["float16_outputs"]
    assert verdict["evidence"]["outputs"] == ["net output 0"]
    assert 'Activation("sigmoid", dtype="float32")' in verdict["action"]


class _Tutorial:
    """The keras-io tutorials' train_step, unscaled, on a float32 layer."""

    @staticmethod
    def build(keras):
        import tensorflow as tf

        class Tutorial(keras.Model):
            def __init__(self):
                super().__init__()
                self.dense = keras.layers.Dense(1, dtype="float32")

            def call(self, x):
                return self.dense(x)

            def train_step(self, data):
                x, y = data
                with tf.GradientTape() as tape:
                    loss = tf.reduce_mean(tf.square(self(x) - y))
                grads = tape.gradient(loss, self.trainable_weights)
                self.optimizer.apply_gradients(zip(grads, self.trainable_weights, strict=True))
                return {"loss": loss}

        model = Tutorial()
        model.compile(optimizer="sgd")
        return model


@pytest.mark.tensorflow
def test_a_float32_runs_unscaled_train_step_is_judged_on_a_t4_what_if(keras) -> None:
    keras.mixed_precision.set_global_policy("float32")
    x = np.ones((64, 2), "float32")
    report = accelkit.keras.fit(_Tutorial.build(keras), x, x[:, :1], verbose=0, plan=CPU_PLAN)
    assert "unscaled_train_step" not in _advice(report)  # float32 here: nothing is divided
    on_t4 = accelkit.advisor.advise(T4_PLAN.hardware, T4_PLAN, report)
    (verdict,) = [a for a in on_t4 if a.id == "unscaled_train_step"]
    assert verdict.severity is Severity.WARNING and "NVIDIA T4" in verdict.title
    assert "scale_loss" in verdict.action


@pytest.mark.tensorflow
def test_a_measured_unscaled_step_says_it_was_corrected(keras) -> None:
    keras.mixed_precision.set_global_policy("mixed_float16")
    x = np.ones((64, 2), "float32")
    report = accelkit.keras.fit(_Tutorial.build(keras), x, x[:, :1], verbose=0, plan=CPU_PLAN)
    verdict = _advice(report)["unscaled_train_step"]
    assert (
        verdict["severity"] == "warning"
        and "applied its gradients as computed" in (verdict["title"])
    )


def test_an_uncorrected_unscaled_step_is_critical() -> None:
    facts = {
        "keras_policy": "mixed_float16",
        "custom_train_step": {"model_class": "VAE", "scales_loss": False},
    }
    advice = train_step.unscaled_train_step(Context.build(None, None, {"facts": facts}))
    assert advice.severity is Severity.CRITICAL and "divided by the loss scale" in advice.title


def test_a_step_that_scales_or_a_bf16_policy_gets_no_verdict() -> None:
    for policy, scales in (("mixed_float16", True), ("mixed_bfloat16", False)):
        facts = {
            "keras_policy": policy,
            "custom_train_step": {"model_class": "VAE", "scales_loss": scales},
        }
        assert train_step.unscaled_train_step(Context.build(None, None, {"facts": facts})) is None


@pytest.mark.tensorflow
def test_a_model_without_call_gets_a_readable_flop_note(keras) -> None:
    from accelkit.profiling.flops_tensorflow import count_train_step_flops

    class Parts(keras.Model):
        def train_step(self, data):
            return {}

    count = count_train_step_flops(Parts(), np.ones((2, 2), "float32"))
    assert count.total is None
    (note,) = count.notes
    assert "has no call()" in note and "kwargs" not in note
