"""accelkit.keras.checks on real Keras 3 models (CPU): token ids declared float and rounded
by float16, 16-bit outputs, and the guard that stops such a model before it trains."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import accelkit
from accelkit.keras import checks

from ..helpers.keras_models import global_policy_kept

pytestmark = pytest.mark.tensorflow
keras = pytest.importorskip("keras")
pytest.importorskip("tensorflow")

MAXLEN, VOCAB = 20, 20000
IDS = [3, 2049, 12345, 19990]  # float16: 3, 2048, 12344, 19984


@pytest.fixture(autouse=True)
def policy_kept():
    with global_policy_kept():
        yield


@pytest.fixture
def mixed():
    keras.mixed_precision.set_global_policy("mixed_float16")


def token_and_position_embedding():
    """keras-io's "Text classification with Transformer" embedding layer, as published."""

    class TokenAndPositionEmbedding(keras.layers.Layer):
        def __init__(self, maxlen, vocab_size, embed_dim, **kwargs):
            super().__init__(**kwargs)
            self.token_emb = keras.layers.Embedding(input_dim=vocab_size, output_dim=embed_dim)
            self.pos_emb = keras.layers.Embedding(input_dim=maxlen, output_dim=embed_dim)

        def call(self, x):
            maxlen = keras.ops.shape(x)[-1]
            positions = keras.ops.arange(start=0, stop=maxlen, step=1)
            return self.token_emb(x) + self.pos_emb(positions)

    return TokenAndPositionEmbedding


def text_transformer(dtype=None, vocab=VOCAB, name=None):
    """keras-io's text transformer, small: `layers.Input(shape=(maxlen,))` unless `dtype`."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input(shape=(MAXLEN,), dtype=dtype, name=name)
    embedding = token_and_position_embedding()(MAXLEN, vocab, 8, name="token_and_position")
    x = embedding(inputs)
    x = keras.layers.MultiHeadAttention(num_heads=2, key_dim=8)(x, x)
    x = keras.layers.GlobalAveragePooling1D()(x)
    outputs = keras.layers.Dense(2, activation="softmax", name="probabilities")(x)
    return keras.Model(inputs, outputs), embedding


def batch(dtype="int64"):
    return np.array([IDS + [7] * (MAXLEN - len(IDS))], dtype=dtype)


def looked_up(embedding, ids):
    """Which token rows `embedding` returned for `ids`: the float16 rows are matched back to
    the table (positions subtracted), so a rounded id shows as its neighbour."""
    table = keras.ops.convert_to_numpy(embedding.token_emb.embeddings).astype("float32")
    positions = keras.ops.convert_to_numpy(embedding.pos_emb.embeddings).astype("float32")
    out = keras.ops.convert_to_numpy(embedding(ids)).astype("float32")[0] - positions
    return [
        int(np.argmin(np.abs(table.astype("float16").astype("float32") - row).sum(1)))
        for row in out[: len(IDS)]
    ]


# -- token ids declared float ---------------------------------------------------------------


def test_float_ids_of_the_keras_io_transformer_are_found_and_really_rounded(mixed) -> None:
    model, embedding = text_transformer()
    assert looked_up(embedding, batch("float32")) == [3, 2048, 12344, 19984]  # the corruption
    [found] = checks.float_ids(model)
    assert found == {
        "layer": "token_and_position",
        "type": "TokenAndPositionEmbedding",
        "embedding": "token_emb",
        "input_dim": VOCAB,
        "input": model.inputs[0]._keras_history.operation.name,
        "input_dtype": "float32",
        "input_shape": [MAXLEN],
        "cast_by": "token_and_position",
        "cast_dtype": "float16",
    }


def test_the_guard_names_the_layer_the_input_and_the_fix(mixed) -> None:
    model, _ = text_transformer(name="ids")
    with pytest.raises(checks.UnsafeMixedPrecision) as raised:
        checks.check_before_training(model)
    message = str(raised.value)
    assert isinstance(raised.value, ValueError)
    for part in (
        "'ids' (float32)",
        "'token_emb'",
        "'token_and_position'",
        "float16",
        "mixed_float16",
        "up to 2048",
        "2049 -> 2048",
        "19999 -> 20000 [out of range]",
        'keras.Input(shape=(20,), dtype="int32")',
        "allow_float_ids=True",
    ):
        assert part in message, part
    assert raised.value.findings[0]["input"] == "ids"


def test_allow_float_ids_warns_and_returns_the_facts(mixed, caplog) -> None:
    model, _ = text_transformer()
    with caplog.at_level(logging.WARNING, logger="accelkit"):
        found = checks.check_before_training(model, "mixed_float16", allow_float_ids=True)
    assert found[0]["cast_dtype"] == "float16"
    assert 'keras.Input(shape=(20,), dtype="int32")' in caplog.text


def test_the_first_batch_shows_how_many_ids_change(mixed) -> None:
    model, _ = text_transformer(name="ids")
    expected = {
        "input": "ids",
        "max_id": 19990,
        "values": MAXLEN,
        "changed": 3,
        "rounded_in": "float16",
        "exact_up_to": 2048,
        "example": [19990, 19984.0],
        "cast_by": "token_and_position",
        "cast_dtype": "float16",
    }
    for x in (
        batch("int64"),
        batch("float32"),
        {"ids": batch()},
        [batch()],
        keras.ops.convert_to_tensor(batch("int32")),
    ):
        found = checks.ids_exceed_float16(x, model)
        assert {k: found[k] for k in expected} == expected, type(x)
    small = np.full((1, MAXLEN), 2048, dtype="int64")
    assert checks.ids_exceed_float16(small, model) is None  # exact in float16


def test_int32_ids_are_exact_and_give_no_finding(mixed) -> None:
    model, embedding = text_transformer(dtype="int32")
    assert looked_up(embedding, batch("int32")) == IDS
    assert checks.float_ids(model) == []
    assert checks.check_before_training(model) == []
    assert checks.ids_exceed_float16(batch(), model) is None


def test_a_float_input_straight_into_embedding_is_exact_and_not_reported(mixed) -> None:
    """Embedding does not autocast: float32 ids reach its int32 cast exactly."""
    inputs = keras.Input((MAXLEN,))
    embedding = keras.layers.Embedding(VOCAB, 4)
    model = keras.Model(inputs, embedding(inputs))
    out = keras.ops.convert_to_numpy(model(batch("float32")))[0]
    table = keras.ops.convert_to_numpy(embedding.embeddings)
    assert np.array_equal(out[: len(IDS)], table[IDS].astype(out.dtype))
    assert checks.float_ids(model) == []


@pytest.mark.parametrize("between", ["lambda", "reshape", "cast", "lambda_then_int32"])
def test_a_casting_op_between_input_and_embedding_is_found(mixed, between) -> None:
    inputs = keras.Input((MAXLEN,))
    x = {
        # Each layer is built only when its case is the one chosen.
        "lambda": lambda t: keras.layers.Lambda(lambda v: v, name="lambda")(t),  # noqa: PLW0108
        "reshape": lambda t: keras.layers.Reshape((MAXLEN,), name="reshape")(t),  # noqa: PLW0108
        "cast": lambda t: keras.ops.cast(t, "float16"),
        "lambda_then_int32": lambda t: keras.ops.cast(  # rounded before the int cast
            keras.layers.Lambda(lambda v: v, name="lambda_then_int32")(t), "int32"
        ),
    }[between](inputs)
    model = keras.Model(inputs, keras.layers.Embedding(VOCAB, 4, name="emb")(x))
    [found] = checks.float_ids(model)
    assert found["embedding"] == "emb" and found["cast_dtype"] == "float16"
    assert between in found["cast_by"]
    cast_to_int = keras.Model(
        inputs, keras.layers.Embedding(VOCAB, 4)(keras.ops.cast(inputs, "int32"))
    )
    assert checks.float_ids(cast_to_int) == []


def test_a_model_built_before_the_policy_rounds_nothing_yet() -> None:
    model, _ = text_transformer()  # float32
    keras.mixed_precision.set_global_policy("mixed_float16")
    [found] = checks.check_before_training(model)  # no error: nothing is rounded yet
    assert found["cast_dtype"] == "float32"


def test_a_vocabulary_float16_holds_exactly_is_allowed(mixed) -> None:
    model, _ = text_transformer(vocab=2049)  # ids 0..2048
    assert checks.check_before_training(model)[0]["input_dim"] == 2049


def test_a_subclassed_model_is_caught_at_the_first_batch(mixed) -> None:
    class Classifier(keras.Model):
        def __init__(self):
            super().__init__(name="classifier")
            self.embed = token_and_position_embedding()(MAXLEN, VOCAB, 8)
            self.pool = keras.layers.GlobalAveragePooling1D()

        def call(self, x):
            return self.pool(self.embed(x))

    model = Classifier()
    model(batch("float32"))
    assert checks.float_ids(model) == [] and checks.float16_outputs(model) == []
    found = checks.ids_exceed_float16(batch("float32"), model)
    assert found["cast_by"] == "classifier" and found["changed"] == 3
    assert checks.ids_exceed_float16(batch("int64"), model) is None  # never autocast
    with pytest.raises(checks.UnsafeMixedPrecision, match="whole numbers up to 19990"):
        checks.check_first_batch(batch("float32"), model)
    assert checks.check_first_batch(batch("float32"), model, allow_float_ids=True) == found


def test_a_cnn_has_no_finding(mixed) -> None:
    inputs = keras.Input((16, 16, 3))
    x = keras.layers.Conv2D(8, 3, activation="relu")(inputs)
    x = keras.layers.GlobalAveragePooling2D()(x)
    model = accelkit.keras.float32_head(keras.Model(inputs, keras.layers.Dense(10)(x)))
    images = np.full((2, 16, 16, 3), 4097.0, dtype="float32")  # whole numbers, not ids
    assert checks.float_ids(model) == []
    assert checks.ids_exceed_float16(images, model) is None
    assert checks.check_before_training(model) == []
    assert checks.mixed_precision_facts(model) == {"float_id_inputs": [], "float16_outputs": []}


# -- 16-bit outputs ---------------------------------------------------------------------------


def test_float16_outputs_are_named_until_a_float32_head(mixed) -> None:
    model, _ = text_transformer(dtype="int32")
    assert model.outputs[0].dtype == "float16"
    assert checks.float16_outputs(model) == ["probabilities"]
    assert checks.float16_outputs(accelkit.keras.float32_head(model)) == []


def test_float32_outputs_under_float32_are_not_named() -> None:
    model, _ = text_transformer(dtype="int32")
    assert checks.float16_outputs(model) == []


def test_inspection_never_raises_on_what_it_cannot_read() -> None:
    assert checks.float_ids(object()) == []
    assert checks.float16_outputs(object()) == []
    assert checks.ids_exceed_float16(batch(), object()) is None
