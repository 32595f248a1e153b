"""The float32 head keeps a model's output names and structure (issue 38): keras.io's
multi-output models, compiled with name-keyed `loss`, `loss_weights` and `metrics`,
train under `accelkit.keras.fit` and `accelkit.keras.float32_head` with every per-head
name unchanged (`cls_loss`, `val_cls_loss`), so callbacks that monitor one work; and the
heads compute exactly what TensorFlow's mixed-precision guide's hand-written heads do."""

from __future__ import annotations

import csv
import warnings

import numpy as np
import pytest

import accelkit
from accelkit.hardware.info import GpuInfo, HardwareInfo
from accelkit.planning import Request, plan

from ..helpers.keras_models import global_policy_kept

pytestmark = pytest.mark.tensorflow
keras = pytest.importorskip("keras")
pytest.importorskip("tensorflow")

PLANS = {
    "mixed_float16": plan(
        HardwareInfo(gpus=(GpuInfo(0, "Tesla T4", compute_capability=(7, 5)),)),
        Request(framework="tensorflow"),
    ),
    "mixed_bfloat16": plan(
        HardwareInfo(gpus=(GpuInfo(0, "NVIDIA A100-SXM4-80GB", compute_capability=(8, 0)),)),
        Request(framework="tensorflow"),
    ),
}
N = 32


# Each case trains under one mixed policy; the cases alternate them, so both policies meet
# every structure (list and dict outputs) while the file stays quick.
BOTH = pytest.mark.parametrize("policy", sorted(PLANS), indirect=True)


@pytest.fixture
def policy(request):
    """The mixed policy `request.param`, applied as `accelkit.apply` applies its plan."""
    with global_policy_kept():
        accelkit.apply(PLANS[request.param])
        assert keras.mixed_precision.global_policy().name == request.param
        yield request.param


def _dense(units: int, name: str, seed: int, activation: str | None = None):
    return keras.layers.Dense(
        units,
        activation=activation,
        name=name,
        kernel_initializer=keras.initializers.GlorotUniform(seed=seed),
        bias_initializer=keras.initializers.RandomUniform(-0.1, 0.1, seed=seed + 100),
    )


def _heads(*, three: bool = False, guide: bool = False) -> dict:
    """keras.io's multi-output heads on one trunk, in the model's order: `cls` (softmax
    Dense), `reg` (linear Dense), and with `three` a `Softmax` layer `parts` after its
    logits. With `guide`, written as TensorFlow's mixed-precision guide writes them:
    logits, then a float32 `Activation` carrying the output's name."""
    inputs = keras.Input((4,), name="features")
    trunk = _dense(8, "trunk", 1, "relu")(inputs)
    if guide:
        heads = {
            "cls": keras.layers.Activation("softmax", dtype="float32", name="cls")(
                _dense(5, "cls_logits", 2)(trunk)
            ),
            "reg": keras.layers.Activation("linear", dtype="float32", name="reg")(
                _dense(1, "reg_logits", 3)(trunk)
            ),
        }
    else:
        heads = {"cls": _dense(5, "cls", 2, "softmax")(trunk), "reg": _dense(1, "reg", 3)(trunk)}
    if three:
        logits = _dense(3, "parts_logits", 4)(trunk)
        softmax = (
            keras.layers.Activation("softmax", dtype="float32", name="parts")
            if guide
            else keras.layers.Softmax(name="parts")
        )
        heads["parts"] = softmax(logits)
    return {"inputs": inputs, "heads": heads}


def _model(outputs: str = "list", *, three: bool = False, guide: bool = False):
    """A compiled multi-output functional model, its outputs a list or a dict."""
    built = _heads(three=three, guide=guide)
    heads = built["heads"]
    structure = heads if outputs == "dict" else list(heads.values())
    model = keras.Model(built["inputs"], structure, name="multi")
    _compile(model, three=three)
    return model


def _compile(model, *, three: bool = False) -> None:
    loss = {"cls": "sparse_categorical_crossentropy", "reg": "mse"}
    loss_weights = {"cls": 1.0, "reg": 0.5}
    metrics = {"cls": ["accuracy"], "reg": ["mae"]}
    if three:
        loss["parts"] = "sparse_categorical_crossentropy"
        loss_weights["parts"] = 0.25
        metrics["parts"] = ["accuracy"]
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=loss,
        loss_weights=loss_weights,
        metrics=metrics,
    )


def _data(outputs: str = "list", *, three: bool = False):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N, 4)).astype("float32")
    y = {"cls": rng.integers(0, 5, N), "reg": rng.normal(size=(N, 1)).astype("float32")}
    if three:
        y["parts"] = rng.integers(0, 3, N)
    return x, (y if outputs == "dict" else list(y.values()))


def _names(*, three: bool = False) -> set[str]:
    """The per-head names Keras logs for `_model` (training and validation)."""
    names = {"loss", "cls_loss", "cls_accuracy", "reg_loss", "reg_mae"}
    if three:
        names |= {"parts_loss", "parts_accuracy"}
    return names | {f"val_{name}" for name in names}


def _keras_names(logged) -> set[str]:
    """The names in `logged` but accelkit's own figures (``accelkit_step_time_s``...)."""
    return {name for name in logged if not name.startswith("accelkit_")}


class _LogKeys(keras.callbacks.Callback):
    """The keys of every epoch's logs, as a user's callback sees them."""

    def __init__(self) -> None:
        super().__init__()
        self.keys: set[str] = set()

    def on_epoch_end(self, epoch, logs=None) -> None:
        self.keys |= set(logs or {})


@pytest.mark.parametrize(
    ("policy", "outputs", "three"),
    [
        ("mixed_float16", "list", False),
        ("mixed_bfloat16", "dict", False),
        ("mixed_float16", "dict", True),
        ("mixed_bfloat16", "list", True),
    ],
    indirect=["policy"],
)
def test_fit_keeps_every_per_head_name(policy, outputs, three, tmp_path) -> None:
    x, y = _data(outputs, three=three)
    logged, log_file = _LogKeys(), tmp_path / "log.csv"
    with pytest.warns(UserWarning, match="float32-head"):
        report = accelkit.keras.fit(
            _model(outputs, three=three),
            x,
            y,
            batch_size=8,
            epochs=2,
            validation_split=0.25,
            verbose=0,
            plan=PLANS[policy],
            callbacks=[logged, keras.callbacks.CSVLogger(str(log_file))],
        )
    assert _keras_names(report.history) == _names(three=three)
    assert _keras_names(logged.keys) == _names(three=three)
    with log_file.open() as f:
        assert _keras_names(next(csv.reader(f))) == _names(three=three) | {"epoch"}
    trained = report.trained_model
    assert sorted(trained.output_names) == sorted(_heads(three=three)["heads"])
    assert all(o.dtype == "float32" for o in trained.outputs)


@pytest.mark.parametrize(
    ("policy", "outputs"),
    [("mixed_float16", "list"), ("mixed_bfloat16", "dict")],
    indirect=["policy"],
)
def test_the_documented_float32_head_keeps_names_and_structure(policy, outputs) -> None:
    model = _model(outputs, three=True)
    head = accelkit.keras.float32_head(model)
    assert head.output_names == model.output_names  # a dict's: Keras' (sorted) order
    assert sorted(head.output_names) == ["cls", "parts", "reg"]
    assert [head.get_layer(name).dtype_policy.name for name in head.output_names] == ["float32"] * 3
    assert type(head.output) is type(model.output)
    if outputs == "dict":
        assert list(head.output) == list(model.output) == ["cls", "reg", "parts"]
    _compile(head, three=True)
    x, y = _data(outputs, three=True)
    history = head.fit(x, y, batch_size=8, epochs=1, validation_split=0.25, verbose=0)
    assert set(history.history) == _names(three=True)
    predicted = head.predict(x, verbose=0)
    if outputs == "dict":
        assert sorted(predicted) == ["cls", "parts", "reg"]
        predicted = [predicted[name] for name in ("cls", "reg", "parts")]
    assert [p.dtype for p in predicted] == [np.float32] * 3
    assert [p.shape for p in predicted] == [(N, 5), (N, 1), (N, 3)]


@BOTH
def test_a_one_output_list_stays_a_list(policy) -> None:
    inputs = keras.Input((4,))
    model = keras.Model(inputs, [_dense(5, "cls", 2, "softmax")(inputs)])
    head = accelkit.keras.float32_head(model)
    assert isinstance(head.output, list) and head.output_names == ["cls"]


@BOTH
def test_an_output_layer_that_also_feeds_another_keeps_its_name(policy) -> None:
    inputs = keras.Input((4,))
    trunk = _dense(8, "trunk", 1, "relu")(inputs)  # an output and the input of `cls`
    model = keras.Model(inputs, [trunk, _dense(5, "cls", 2, "softmax")(trunk)])
    head = accelkit.keras.float32_head(model)
    assert head.output_names == ["trunk", "cls"]
    assert all(o.dtype == "float32" for o in head.outputs)
    head.compile(optimizer="adam", loss={"trunk": "mse", "cls": "sparse_categorical_crossentropy"})
    x, y = _data()
    history = head.fit(x, {"trunk": np.zeros((N, 8)), "cls": y[0]}, epochs=1, verbose=0)
    assert {"trunk_loss", "cls_loss"} <= set(history.history)


@pytest.mark.parametrize(
    ("policy", "outputs"),
    [("mixed_float16", "dict"), ("mixed_bfloat16", "list")],
    indirect=["policy"],
)
def test_early_stopping_and_checkpoint_monitor_a_per_head_metric(policy, outputs, tmp_path) -> None:
    x, y = _data(outputs)
    stop = keras.callbacks.EarlyStopping(
        monitor="val_cls_loss", mode="min", patience=1, restore_best_weights=True
    )
    best = tmp_path / "best.weights.h5"
    checkpoint = keras.callbacks.ModelCheckpoint(
        str(best),
        monitor="val_cls_loss",
        mode="min",
        save_best_only=True,
        save_weights_only=True,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = accelkit.keras.fit(
            _model(outputs),
            x,
            y,
            batch_size=8,
            epochs=6,
            validation_split=0.25,
            verbose=0,
            plan=PLANS[policy],
            callbacks=[stop, checkpoint],
        )
    said = [str(w.message) for w in caught]
    assert not [s for s in said if "val_cls_loss" in s], said  # "... not available"
    losses = report.history["val_cls_loss"]
    assert stop.best == min(losses) and stop.best_epoch == losses.index(min(losses))
    trained = report.trained_model  # the best epoch's weights, restored at the end
    restored = trained.get_weights()
    trained.load_weights(best)  # the best epoch's weights, saved then
    for a, b in zip(restored, trained.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    ("policy", "outputs", "door"),
    [
        ("mixed_float16", "list", "float32_head"),
        ("mixed_float16", "dict", "fit"),
        ("mixed_bfloat16", "dict", "float32_head"),
        ("mixed_bfloat16", "list", "fit"),
    ],
    indirect=["policy"],
)
def test_training_is_bit_identical_to_the_guides_hand_written_heads(policy, outputs, door) -> None:
    x, y = _data(outputs, three=True)
    guide = _model(outputs, three=True, guide=True)
    guide.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    model = _model(outputs, three=True)
    if door == "fit":
        with pytest.warns(UserWarning, match="float32-head"):
            trained = accelkit.keras.fit(
                model, x, y, batch_size=8, epochs=2, shuffle=False, verbose=0, plan=PLANS[policy]
            ).trained_model
    else:
        trained = accelkit.keras.float32_head(model)
        _compile(trained, three=True)
        trained.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    same_layers = {"trunk": "trunk", "cls": "cls_logits", "reg": "reg_logits"}
    for ours, theirs in {**same_layers, "parts_logits": "parts_logits"}.items():
        for a, b in zip(
            model.get_layer(ours).get_weights(), guide.get_layer(theirs).get_weights(), strict=True
        ):
            np.testing.assert_array_equal(a, b)
    ours_out, theirs_out = trained.predict(x, verbose=0), guide.predict(x, verbose=0)
    for a, b in zip(keras.tree.flatten(ours_out), keras.tree.flatten(theirs_out), strict=True):
        assert a.dtype == b.dtype == np.float32
        np.testing.assert_array_equal(a, b)


@BOTH
def test_a_saved_head_loads_with_its_names_and_structure(policy, tmp_path) -> None:
    head = accelkit.keras.float32_head(_model("dict", three=True))
    head.save(tmp_path / "head.keras")
    loaded = keras.models.load_model(tmp_path / "head.keras")
    assert loaded.output_names == head.output_names
    assert list(loaded.output) == ["cls", "reg", "parts"]
    x, _ = _data()
    for name, values in head.predict(x, verbose=0).items():
        np.testing.assert_array_equal(loaded.predict(x, verbose=0)[name], values)
