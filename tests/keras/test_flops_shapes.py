"""Each step's FLOPs follow its batch's shapes in a Keras fit (issue 37): token batches of
several lengths through `accelkit.keras.fit` and `ProfileCallback` on real Keras 3 /
TensorFlow (CPU), where the first batch's count stood for every step; how Keras batches
are read (`accelkit.keras.batches.KERAS`). Independent counts are
`count_train_step_flops` on each steady batch whole."""

from __future__ import annotations

import numpy as np
import pytest

import accelkit
from accelkit.hardware.info import HardwareInfo
from accelkit.planning import Request, plan
from accelkit.profiling import flops_shapes

from ..helpers import keras_models

pytestmark = pytest.mark.tensorflow
keras = pytest.importorskip("keras")
tf = pytest.importorskip("tensorflow")

from accelkit.keras.batches import KERAS
from accelkit.profiling.flops_tensorflow import count_train_step_flops

CPU_PLAN = plan(HardwareInfo(source="snapshot"), Request(framework="tensorflow"))
VOCAB, WIDTH = 50, 16


@pytest.fixture(autouse=True)
def float32_policy():
    with keras_models.global_policy_kept():
        yield


def attention_model(steps_per_execution: int = 1):
    """Token ids of any length -> Embedding -> self-attention -> Dense logits per token."""
    keras.utils.set_random_seed(0)
    ids = keras.Input((None,), dtype="int32")
    hidden = keras.layers.Embedding(VOCAB, WIDTH)(ids)
    hidden = keras.layers.MultiHeadAttention(num_heads=2, key_dim=8)(hidden, hidden)
    model = keras.Model(ids, keras.layers.Dense(VOCAB)(hidden))
    model.compile(
        optimizer="sgd",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        steps_per_execution=steps_per_execution,
    )
    return model


def token_batches(lengths, size: int = 4):
    """One (ids, next ids) batch of `size` rows per length, as a padding collator gives."""
    rng = np.random.default_rng(0)
    batches = []
    for length in lengths:
        ids = rng.integers(1, VOCAB, (size, length + 1)).astype("int32")
        batches.append((ids[:, :-1], ids[:, 1:]))
    return batches


def fitted(model, batches, **options):
    """`accelkit.keras.fit` over a generator of `batches`, one epoch, warm-up 1."""
    return accelkit.keras.fit(
        model,
        (batch for batch in batches),
        steps_per_epoch=len(batches),
        verbose=0,
        plan=CPU_PLAN,
        warmup=1,
        window=2,
        sample_gpu=False,
        **options,
    )


def counts(model, batches):
    return [count_train_step_flops(model, x, y).total for x, y in batches]


def test_a_fit_whose_first_batch_is_short_counts_every_long_step_as_long():
    """The issue's case on Keras: a first batch of (4, 4) token ids, then six of (4, 64):
    the first batch's count stood for all of them."""
    model = attention_model()
    batches = token_batches([4] + [64] * 6)
    report = fitted(model, batches)
    short, long = counts(model, batches[:2])
    assert long > 15 * short
    assert report.steady_steps == 6
    assert report.flops_per_step == pytest.approx(long, rel=0.02)
    assert report.achieved_tflops == pytest.approx(
        long * report.steady_steps / report.steady_seconds / 1e12, rel=0.02
    )
    assert "each step's FLOPs from its own batches' shapes" in report.notes["flops_per_step"]


def test_every_length_through_a_profile_callback_comes_counted_or_fitted():
    """A new length every batch (dynamic padding): a few are counted on one sample, the
    rest fitted in the length; the run's FLOPs per step are their steps' mean."""
    model = attention_model()
    lengths = [6, 10, 14, 18, 22, 26, 30, 34, 38, 12, 20, 28]
    batches = token_batches(lengths)
    callback = accelkit.keras.ProfileCallback(CPU_PLAN, warmup=1, window=2, sample_gpu=False)
    model.fit(
        (batch for batch in batches),
        steps_per_epoch=len(batches),
        verbose=0,
        callbacks=[callback],
    )
    report = callback.report
    steady = counts(model, batches[1:])
    assert report.steady_steps == len(steady)
    assert report.flops_per_step == pytest.approx(sum(steady) / len(steady), rel=0.02)
    note = report.notes["flops_per_step"]
    assert "fitted in the sequence length" in note
    assert "a quadratic in the sequence length through the counts at" in note


def test_fixed_shapes_keep_the_one_count_and_say_nothing_of_shapes():
    model = attention_model()
    batches = token_batches([16] * 6)
    report = fitted(model, batches)
    assert report.flops_per_step == counts(model, batches[:1])[0]
    assert "own batches' shapes" not in report.notes.get("flops_per_step", "")


def test_steps_inside_keras_compiled_loop_keep_the_first_count_and_say_so():
    """steps_per_execution=2 on a tf.data input: after the first call Keras runs its
    batches in its compiled loop, where their shapes are never seen."""
    model = attention_model(steps_per_execution=2)
    batches = token_batches([8, 32, 8, 32, 8, 32, 8, 32])
    spec = tf.TensorSpec((None, None), tf.int32)
    dataset = tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=(spec, spec))
    report = accelkit.keras.fit(
        model, dataset, verbose=0, plan=CPU_PLAN, warmup=1, window=2, sample_gpu=False
    )
    assert report.steps == 8
    assert report.flops_per_step == counts(model, batches[:1])[0]
    note = report.notes["flops_per_step"]
    assert "ran inside Keras' compiled loop (steps_per_execution=2" in note


def test_keras_batches_are_read_as_keras_unpacks_them():
    ids = np.zeros((8, 16), "int32")
    weights = np.ones(8, "float32")
    sample, size = KERAS.read(({"ids": ids, "mask": np.ones((8, 16))}, ids, weights))
    assert size == 8 and sample.length == 16
    assert sample.structure == ((-1, -2), (-1, -2), (-1, -2), (-1,))
    # Images: no token ids, every dimension its own; a tf tensor as a NumPy array.
    images, size = KERAS.read((tf.zeros((4, 32, 32, 3)), tf.zeros((4,))))
    assert images.length is None and size == 4
    assert images.elements == 32 * 32 * 3 + 1
    ragged = tf.ragged.constant([[1, 2], [3]])
    assert KERAS.read((ragged, tf.zeros((2,)))) is None


def test_one_sample_is_cut_from_every_batch_tensor_and_kept_as_a_copy():
    x = np.arange(24, dtype="float32").reshape(8, 3)
    one = KERAS.one_sample((x, np.zeros(8), np.zeros(3)), 8)
    assert [value.shape for value in one] == [(1, 3), (1,), (3,)]
    kept = KERAS.copy(one)
    x[0] = -1.0  # a loader that reuses its buffer
    assert kept[0][0].tolist() == [0.0, 1.0, 2.0]
    assert flops_shapes.Sample.of([(1, 3)], 1, None) == KERAS.read((kept[0],))[0]
