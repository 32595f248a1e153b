"""`accelkit.keras.float32_head` computes the last activation in float32 from the logits
(TensorFlow's mixed-precision guide), not a cast after a float16 activation (issue 22, 1)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import accelkit

from ..helpers.keras_models import global_policy_kept

pytestmark = pytest.mark.tensorflow
keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

X = np.array([[5.0], [8.0], [12.0]], dtype="float32")


@pytest.fixture(autouse=True)
def mixed_float16():
    with global_policy_kept():
        keras.mixed_precision.set_global_policy("mixed_float16")
        yield


def _one_input(last) -> keras.Model:
    inputs = keras.Input((1,))
    return keras.Model(inputs, last(inputs))


def _guide_head(activation: str) -> keras.Model:
    """The TF guide's way: float16 logits, the activation in a float32 layer."""
    inputs = keras.Input((1,))
    logits = keras.layers.Dense(1, kernel_initializer="ones")(inputs)
    return keras.Model(inputs, keras.layers.Activation(activation, dtype="float32")(logits))


def _bce_and_gradient(model) -> tuple[float, float]:
    with tf.GradientTape() as tape:
        loss = keras.losses.BinaryCrossentropy()(np.zeros((3, 1), "float32"), model(X))
    return float(loss), float(tape.gradient(loss, model.trainable_weights)[0].numpy().ravel()[0])


def test_a_sigmoid_dense_output_gives_the_guides_loss_and_gradient() -> None:
    model = _one_input(keras.layers.Dense(1, activation="sigmoid", kernel_initializer="ones"))
    head = accelkit.keras.float32_head(model)
    loss, gradient = _bce_and_gradient(head)
    guide_loss, guide_gradient = _bce_and_gradient(_guide_head("sigmoid"))
    assert loss == pytest.approx(guide_loss, rel=1e-6)  # 8.34 (12.29 when cast after)
    assert gradient == pytest.approx(guide_gradient, rel=1e-6)  # 8.32 (1.65)
    assert head.predict(X, verbose=0).max() < 1.0  # sigmoid(12) is exactly 1.0 in float16


def test_the_original_model_is_left_as_it_was_and_shares_the_trained_weights() -> None:
    model = _one_input(keras.layers.Dense(1, activation="sigmoid", name="out"))
    head = accelkit.keras.float32_head(model)
    assert model.output.dtype == "float16" and model.get_layer("out").activation.__name__ == (
        "sigmoid"
    )
    before = model.get_layer("out").kernel.numpy().copy()
    head.compile(optimizer=keras.optimizers.SGD(0.5), loss="binary_crossentropy")
    x = np.linspace(0, 1, 16, dtype="float32")[:, None]  # the first loss-scaled step fits float16
    head.fit(x, np.zeros((16, 1)), epochs=1, verbose=0)
    assert not np.allclose(before, model.get_layer("out").kernel.numpy())
    assert model.predict(X, verbose=0).dtype == np.float16  # still its own float16 sigmoid


@pytest.mark.parametrize("layer", ["softmax_layer", "activation_layer"])
def test_a_separate_activation_layer_is_recomputed_in_float32(layer) -> None:
    inputs = keras.Input((3,))
    logits = keras.layers.Dense(3, kernel_initializer="ones")(inputs)
    last = (
        keras.layers.Softmax() if layer == "softmax_layer" else keras.layers.Activation("softmax")
    )
    head = accelkit.keras.float32_head(keras.Model(inputs, last(logits)))
    guide = keras.Model(inputs, keras.layers.Activation("softmax", dtype="float32")(logits))
    x = np.array([[0.0, 3.001, 3.0]], "float32")
    assert head.output.dtype == "float32"
    np.testing.assert_allclose(head.predict(x, verbose=0), guide.predict(x, verbose=0), rtol=1e-6)


def test_the_head_saves_and_loads(tmp_path) -> None:
    head = accelkit.keras.float32_head(_one_input(keras.layers.Dense(2, activation="softmax")))
    head.save(tmp_path / "head.keras")
    loaded = keras.models.load_model(tmp_path / "head.keras")
    np.testing.assert_allclose(loaded.predict(X, verbose=0), head.predict(X, verbose=0))


def test_an_output_it_can_only_cast_is_said(caplog) -> None:
    inputs = keras.Input((4, 2))
    model = keras.Model(inputs, keras.layers.LSTM(3)(inputs))
    with caplog.at_level(logging.WARNING, logger="accelkit"):
        head = accelkit.keras.float32_head(model)
    assert head.output.dtype == "float32"
    assert "stays float16" in caplog.text and 'dtype="float32"' in caplog.text


def test_a_subclassed_model_is_cast_and_the_warning_names_the_fix(caplog) -> None:
    class Net(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(1, activation="sigmoid")

        def call(self, x):
            return self.dense(x)

    with caplog.at_level(logging.WARNING, logger="accelkit"):
        head = accelkit.keras.float32_head(Net())
    assert head(X).dtype == "float32"
    assert "subclassed" in caplog.text and "stays 16-bit" in caplog.text


def test_fit_trains_the_recomputed_head_and_its_note_says_so() -> None:
    model = _one_input(keras.layers.Dense(1, activation="sigmoid", name="out"))
    model.compile(optimizer="sgd", loss="binary_crossentropy")
    plan = accelkit.plan_for(None, framework="tensorflow")
    with pytest.warns(UserWarning, match="float32-head"):
        report = accelkit.keras.fit(model, X, np.zeros((3, 1)), epochs=1, verbose=0, plan=plan)
    assert "out: sigmoid recomputed in float32" in report.notes["model"]
    assert report.history["loss"][0] == pytest.approx(
        float(keras.losses.BinaryCrossentropy()(np.zeros((3, 1)), _guide_like(model)(X))), rel=1e-3
    )


def _guide_like(model) -> keras.Model:
    """`model`'s own Dense, its sigmoid in float32: the guide's head on the same weights."""
    dense = model.get_layer("out")
    inputs = keras.Input((1,))
    logits = keras.ops.matmul(inputs, dense.kernel) + dense.bias
    return keras.Model(inputs, keras.layers.Activation("sigmoid", dtype="float32")(logits))
