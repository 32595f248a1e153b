"""Keras faults of issue 22, item 7: ragged batches (D12), a whole-number float feature
beside integer ids (D17). D08 (initial_epoch) is tests/keras/test_keras_fit.py's
test_a_fit_from_initial_epoch_reports_the_epochs_it_trained."""

from __future__ import annotations

import numpy as np
import pytest

import accelkit

from ..helpers.keras_models import global_policy_kept

pytestmark = pytest.mark.tensorflow
keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

CPU_PLAN = accelkit.plan_for(None, framework="tensorflow")


@pytest.fixture(autouse=True)
def policy_kept():
    with global_policy_kept():
        yield


class Bag(keras.Model):
    """Mean of token embeddings over ragged sequences."""

    def __init__(self):
        super().__init__()
        self.embed, self.out = keras.layers.Embedding(100, 8), keras.layers.Dense(2)

    def call(self, ids):
        dense = ids.to_tensor() if isinstance(ids, tf.RaggedTensor) else ids
        return self.out(tf.reduce_mean(self.embed(dense), 1))


def _ragged(n: int = 128):
    rng = np.random.default_rng(0)
    lengths = rng.integers(3, 12, n)
    ids = tf.ragged.constant([rng.integers(1, 100, k).tolist() for k in lengths])
    dataset = tf.data.Dataset.from_tensor_slices((ids, rng.integers(0, 2, n))).batch(32)
    return dataset, int(lengths[:32].sum())


def _bag():
    model = Bag()
    model.compile(
        optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    return model


@pytest.mark.parametrize("door", ["fit", "callback"])
def test_ragged_batches_train_and_are_counted(door) -> None:
    dataset, _ = _ragged()
    if door == "fit":
        report = accelkit.keras.fit(_bag(), dataset, epochs=1, verbose=0, plan=CPU_PLAN)
    else:
        callback = accelkit.keras.ProfileCallback(CPU_PLAN)
        _bag().fit(dataset, epochs=1, verbose=0, callbacks=[callback])
        report = callback.report
    assert report.steps == 4


def test_a_ragged_batch_holds_the_ids_it_has() -> None:
    from accelkit.keras import batches

    dataset, first_tokens = _ragged()
    assert batches.sizes(next(iter(dataset))) == (32, first_tokens)


class YearAndCategory(keras.Model):
    def __init__(self):
        super().__init__()
        self.embed, self.year = keras.layers.Embedding(50, 4), keras.layers.Dense(4)
        self.out = keras.layers.Dense(1, dtype="float32")

    def call(self, inputs):
        year = self.year((inputs["year"] - 2000.0) / 20.0)
        return self.out(tf.concat([year, tf.reduce_mean(self.embed(inputs["cat"]), 1)], -1))


def test_a_whole_number_float_feature_beside_integer_ids_is_not_an_id() -> None:
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    rng = np.random.default_rng(0)
    x = {
        "year": rng.integers(1990, 2025, (64, 1)).astype("float32"),
        "cat": rng.integers(0, 50, (64, 3)).astype("int32"),
    }
    model = YearAndCategory()
    model.compile(optimizer="adam", loss="mse")
    report = accelkit.keras.fit(
        model, x, rng.random((64, 1)), batch_size=32, verbose=0, plan=CPU_PLAN
    )
    assert "float_ids" not in {a["id"] for a in report.advice}
