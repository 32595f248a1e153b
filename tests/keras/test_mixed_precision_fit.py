"""The checks of accelkit.keras.checks where a user meets them: `accelkit.keras.fit`
refuses a model whose token ids a 16-bit policy rounds, `ProfileCallback` on the user's
own `model.fit` reports it (and float16 outputs) as critical, under an applied plan."""

from __future__ import annotations

import numpy as np
import pytest

import accelkit
from accelkit.hardware.info import GpuInfo, HardwareInfo
from accelkit.keras.checks import UnsafeMixedPrecision
from accelkit.planning import Request, plan

from ..helpers.keras_models import classification_data, global_policy_kept

pytestmark = pytest.mark.tensorflow
keras = pytest.importorskip("keras")
pytest.importorskip("tensorflow")

# After the skips: without Keras, test_checks skips as it is imported and has no names.
from .test_checks import IDS, MAXLEN, VOCAB, text_transformer

T4_PLAN = plan(
    HardwareInfo(gpus=(GpuInfo(0, "Tesla T4", compute_capability=(7, 5)),)),
    Request(framework="tensorflow"),
)  # mixed_float16


@pytest.fixture(autouse=True)
def policy_kept():
    with global_policy_kept():
        yield


def _token_data(n: int = 64) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.integers(0, VOCAB, size=(n, MAXLEN)).astype("float32")  # ids as keras-io feeds them
    x[0, : len(IDS)] = IDS
    return x, rng.integers(0, 2, size=n)


def _compiled(model):
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    return model


def _advice_ids(report) -> dict[str, str]:
    return {a["id"]: a["severity"] for a in report.advice}


def test_fit_refuses_ids_a_16_bit_policy_rounds_and_names_the_fix() -> None:
    accelkit.apply(T4_PLAN)
    model, _ = text_transformer()
    x, y = _token_data()
    with pytest.raises(UnsafeMixedPrecision, match=r"token_and_position.*dtype=\"int32\""):
        accelkit.keras.fit(_compiled(model), x, y, batch_size=16, epochs=1, verbose=0)


def test_fit_told_to_allow_them_trains_with_a_critical_verdict() -> None:
    accelkit.apply(T4_PLAN)
    model, _ = text_transformer()
    x, y = _token_data()
    report = accelkit.keras.fit(
        _compiled(model), x, y, batch_size=16, epochs=1, verbose=0, allow_float_ids=True
    )
    assert _advice_ids(report).get("float_ids") == "critical"
    assert report.facts["float_id_inputs"] and report.facts["ids_over_float16"]["changed"]


def test_int32_ids_train_under_mixed_float16_without_a_verdict() -> None:
    accelkit.apply(T4_PLAN)
    model, _ = text_transformer(dtype="int32")
    x, y = _token_data()
    report = accelkit.keras.fit(
        _compiled(model), x.astype("int32"), y, batch_size=16, epochs=1, verbose=0
    )
    assert "float_ids" not in _advice_ids(report)
    assert report.precision == "fp16"


def test_the_users_own_fit_gets_critical_verdicts_from_the_callback() -> None:
    # The plan applied, the user's model.fit with ProfileCallback: a model with float16
    # outputs (no float32 head) and float ids trains as Keras lets it, and the report
    # says what is wrong instead of nothing.
    accelkit.apply(T4_PLAN)
    model, _ = text_transformer()
    x, y = _token_data()
    callback = accelkit.keras.ProfileCallback(warmup=1, window=2)
    _compiled(model).fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[callback])
    found = _advice_ids(callback.report)
    assert found.get("float_ids") == "critical"
    assert found.get("float16_outputs") == "critical"
    assert callback.report.precision == "fp16"


def test_a_callback_told_to_refuse_stops_the_fit_at_the_first_batch() -> None:
    accelkit.apply(T4_PLAN)
    model, _ = text_transformer()
    x, y = _token_data()
    callback = accelkit.keras.ProfileCallback(allow_float_ids=False)
    with pytest.raises(UnsafeMixedPrecision):
        _compiled(model).fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[callback])


def test_an_unknown_fit_argument_is_the_users_error_not_ours() -> None:
    x, y = classification_data()
    inputs = keras.Input((16,))
    model = _compiled(keras.Model(inputs, keras.layers.Dense(4, activation="softmax")(inputs)))
    with pytest.raises(TypeError, match="epochz"):
        accelkit.keras.fit(model, x, y, epochz=3, plan=T4_PLAN)


def test_a_keras_io_cnn_trains_in_fp16_with_a_float32_head_and_no_critical_verdict() -> None:
    # keras-io's "Simple MNIST convnet", small, under an applied T4 plan (mixed_float16).
    accelkit.apply(T4_PLAN)
    model = keras.Sequential(
        [
            keras.Input(shape=(28, 28, 1)),
            keras.layers.Conv2D(8, kernel_size=(3, 3), activation="relu"),
            keras.layers.MaxPooling2D(pool_size=(2, 2)),
            keras.layers.Flatten(),
            keras.layers.Dropout(0.5),
            keras.layers.Dense(10, activation="softmax"),
        ]
    )
    model.compile(loss="sparse_categorical_crossentropy", optimizer="adam")
    rng = np.random.default_rng(0)
    x = rng.random((64, 28, 28, 1), dtype=np.float32)
    y = rng.integers(0, 10, size=64)
    with pytest.warns(UserWarning, match="float32-head"):
        report = accelkit.keras.fit(model, x, y, batch_size=16, epochs=1, verbose=0)
    assert report.framework == "tensorflow" and report.precision == "fp16"
    assert report.trained_model.output.dtype == "float32"
    assert "critical" not in {a["severity"] for a in report.advice}
