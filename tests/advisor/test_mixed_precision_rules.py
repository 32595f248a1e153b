"""Mixed precision that trains the wrong thing: float token ids rounded by a 16-bit float,
16-bit outputs, PyTorch ids cast to half with the batch; and the keras_policy verdict's
count and action. Plain data first, then facts read from real Keras and PyTorch models."""

from __future__ import annotations

import numpy as np
import pytest

from accelkit import plan_for
from accelkit.advisor import Severity, advise
from accelkit.advisor.context import Context
from accelkit.advisor.rules import keras_policy, mixed_precision
from accelkit.hardware import float_formats
from accelkit.hardware.info import HardwareInfo

from ..helpers.keras_models import global_policy_kept
from .helpers import ids, measured_on

CPU = HardwareInfo(source="cpu")
FLOAT_IDS = {
    "layer": "token_and_position_embedding",
    "type": "TokenAndPositionEmbedding",
    "embedding": "token_emb",
    "input_dim": 20000,
    "input": "input_layer",
    "input_dtype": "float32",
    "input_shape": [200],
    "cast_by": "token_and_position_embedding",
    "cast_dtype": "float16",
}


def keras_run(plan=None, hardware=CPU, **facts):
    m = measured_on(CPU, framework="tensorflow", facts=facts)
    return Context.build(None if plan is not None else hardware, plan, m)


# -- what a float holds -------------------------------------------------------------------------


def test_float_formats_agree_with_numpy_float16() -> None:
    ids = np.arange(70000)
    with np.errstate(over="ignore"):
        as_fp16 = ids.astype(np.float16).astype(np.float64)
    assert [float_formats.rounded(int(v), "float16") for v in ids[::97]] == list(as_fp16[::97])
    assert float_formats.changed_below(20000, "float16") == int(
        (as_fp16[:20000] != ids[:20000]).sum()
    )
    assert float_formats.out_of_range(20000, "float16") == int((as_fp16[:20000] >= 20000).sum())
    assert (
        float_formats.rounded(2049, "float16"),
        float_formats.rounded(12345, "float16"),
        float_formats.rounded(19999, "float16"),
    ) == (2048, 12344, 20000)
    assert float_formats.rounded(257, "bfloat16") == 256
    assert float_formats.rounded(65520, "float16") == float("inf")


# -- Keras: float ids ---------------------------------------------------------------------------


def test_float_ids_under_mixed_float16_are_critical_with_what_float16_does() -> None:
    [found] = mixed_precision.float_ids(
        keras_run(keras_policy="mixed_float16", float_id_inputs=[FLOAT_IDS])
    )
    assert found.severity is Severity.CRITICAL and found.id == "float_ids"
    assert found.evidence == {
        "layer": "token_and_position_embedding",
        "lookup": "token_emb",
        "input": "input_layer",
        "input_dtype": "float32",
        "cast_by": "token_and_position_embedding",
        "rounded_in": "float16",
        "exact_up_to": 2048,
        "vocabulary": 20000,
        "ids_changed": 14654,
        "ids_changed_share": 0.7327,
        "ids_out_of_range": 8,
        "examples": ["2049 -> 2048", "11025 -> 11024", "19999 -> 20000 (out of range)"],
    }
    assert "14,654 of its 20,000 ids (73%) become other ids" in found.title
    assert 'keras.Input(shape=(200,), dtype="int32")' in found.action
    assert "no speed-up" in found.expected_gain


def test_float_ids_lead_the_advice_and_carry_the_first_batch() -> None:
    batch = {
        "input": "input_layer",
        "dtype": "int64",
        "max_id": 19990,
        "values": 6400,
        "changed": 4650,
        "rounded_in": "float16",
        "exact_up_to": 2048,
        "example": [19990, 19984.0],
        "cast_by": "token_and_position_embedding",
        "cast_dtype": "float16",
    }
    found = advise(
        None,
        None,
        measured_on(
            CPU,
            framework="tensorflow",
            input_wait_share=0.5,
            facts={
                "keras_policy": "mixed_float16",
                "float_id_inputs": [FLOAT_IDS],
                "ids_over_float16": batch,
            },
        ),
    )
    assert ids(found)[:2] == ["float_ids", "input_bound"]
    assert found[0].evidence["first_batch_max_id"] == 19990
    assert found[0].evidence["first_batch_changed"] == "4650 of 6400"


def test_a_model_built_in_float32_is_warned_for_when_the_policy_is_mixed() -> None:
    built_before = dict(FLOAT_IDS, cast_dtype="float32")
    [found] = mixed_precision.float_ids(
        keras_run(keras_policy="mixed_float16", float_id_inputs=[built_before])
    )
    assert found.severity is Severity.CRITICAL
    assert "once the model is built under mixed_float16" in found.title
    assert (
        mixed_precision.float_ids(keras_run(keras_policy="float32", float_id_inputs=[built_before]))
        is None
    )


def test_float_ids_quiet_when_every_id_is_exact_or_nothing_casts() -> None:
    small = dict(FLOAT_IDS, input_dim=2049)  # ids 0..2048
    assert (
        mixed_precision.float_ids(keras_run(keras_policy="mixed_float16", float_id_inputs=[small]))
        is None
    )
    assert mixed_precision.float_ids(keras_run(keras_policy="mixed_float16")) is None
    bf16 = dict(small, cast_dtype="bfloat16")  # bfloat16 holds them only to 256
    [found] = mixed_precision.float_ids(
        keras_run(keras_policy="mixed_bfloat16", float_id_inputs=[bf16])
    )
    assert found.evidence["exact_up_to"] == 256 and found.evidence["examples"][0] == "257 -> 256"


def test_float_ids_for_a_what_if_plan_use_that_plans_policy() -> None:
    built_in_float32 = dict(FLOAT_IDS, cast_dtype="float32")
    bf16 = plan_for("A100-SXM4-80GB", framework="tensorflow", precision="bf16")
    [found] = mixed_precision.float_ids(
        keras_run(bf16, keras_policy="float32", float_id_inputs=[built_in_float32])
    )
    assert found.evidence["rounded_in"] == "bfloat16"
    assert "once built under mixed_bfloat16 on NVIDIA A100 SXM4 80GB" in found.title
    fp32 = plan_for("A100-SXM4-80GB", framework="tensorflow", precision="fp32")
    assert (
        mixed_precision.float_ids(
            keras_run(fp32, keras_policy="mixed_float16", float_id_inputs=[FLOAT_IDS])
        )
        is None
    )


def test_a_subclassed_models_first_batch_alone_is_enough() -> None:
    batch = {
        "input": "x",
        "dtype": "float32",
        "max_id": 19990,
        "values": 6400,
        "changed": 4650,
        "rounded_in": "float16",
        "exact_up_to": 2048,
        "example": [19990, 19984.0],
        "cast_by": "classifier",
        "cast_dtype": "float16",
    }
    [found] = mixed_precision.float_ids(
        keras_run(keras_policy="mixed_float16", ids_over_float16=batch)
    )
    assert found.severity is Severity.CRITICAL and "4650 of the batch's 6400" in found.title
    assert "int32" in found.action


# -- Keras: 16-bit outputs ----------------------------------------------------------------------


def test_float16_outputs_under_a_mixed_policy_are_critical() -> None:
    found = mixed_precision.float16_outputs(
        keras_run(keras_policy="mixed_float16", float16_outputs=["probabilities"])
    )
    assert found.severity is Severity.CRITICAL and "probabilities" in found.title
    assert found.evidence["largest_value"] == 65504.0
    assert found.action.startswith(
        "model = accelkit.keras.float32_head(model) before model.compile(...)"
    )
    assert mixed_precision.float16_outputs(keras_run(keras_policy="mixed_float16")) is None
    fp32 = plan_for("A100-SXM4-80GB", framework="tensorflow", precision="fp32")
    assert (
        mixed_precision.float16_outputs(
            keras_run(fp32, keras_policy="mixed_float16", float16_outputs=["probabilities"])
        )
        is None
    )


# -- PyTorch: ids cast to half with the batch ---------------------------------------------------


def test_half_integer_inputs_are_critical() -> None:
    fact = {
        "input": "input_ids",
        "dtype": "bfloat16",
        "shape": [8, 128],
        "max": 19968.0,
        "exact_up_to": 256,
    }
    [found] = mixed_precision.half_ids(
        Context.build(CPU, None, measured_on(CPU, facts={"half_integer_inputs": [fact]}))
    )
    assert found.severity is Severity.CRITICAL and "'input_ids' arrives as bfloat16" in found.title
    assert "is_floating_point()" in found.action
    assert mixed_precision.half_ids(Context.build(CPU, None, measured_on(CPU))) is None


# -- keras_policy: the action fits the plan -------------------------------------------------------

OFF = {
    "keras_policy": "mixed_float16",
    "keras_matmul_layers": 3,
    "keras_layers_off_policy": [
        {"name": "multi_head_attention", "type": "MultiHeadAttention", "compute_dtype": "float32"}
    ],
}


def test_keras_policy_for_the_run_says_rebuild_after_auto_configure() -> None:
    found = keras_policy.keras_policy(keras_run(**OFF))
    assert found.action.startswith(
        "rebuild the model after accelkit.auto_configure(framework='tensorflow')"
    )
    assert "1 of 3 matmul layer(s)" in found.title


def test_keras_policy_for_a_what_if_plan_says_what_to_do_there() -> None:
    a100 = plan_for("A100-SXM4-80GB", framework="tensorflow", precision="bf16")
    found = keras_policy.keras_policy(keras_run(a100, **OFF))
    assert found.action.startswith(
        "on NVIDIA A100 SXM4 80GB: call "
        "accelkit.auto_configure(framework='tensorflow') first "
        "(it sets mixed_bfloat16)"
    )
    assert "rebuild" not in found.action and "computes in bfloat16" in found.action
    fp32 = plan_for("A100-SXM4-80GB", framework="tensorflow", precision="fp32")
    assert keras_policy.keras_policy(keras_run(fp32, **OFF)) is None


# -- facts from real models ------------------------------------------------------------------------


@pytest.mark.tensorflow
def test_multi_head_attention_built_before_the_policy_counts_once() -> None:
    keras = pytest.importorskip("keras")
    from accelkit.keras.facts import model_facts

    with global_policy_kept():
        inputs = keras.Input((16, 32))
        x = keras.layers.MultiHeadAttention(num_heads=2, key_dim=16, name="attention")(
            inputs, inputs
        )
        x = keras.layers.Dense(64, name="wide")(keras.layers.GlobalAveragePooling1D()(x))
        model = keras.Model(inputs, keras.layers.Dense(4, name="head")(x))
        keras.mixed_precision.set_global_policy("mixed_float16")
        facts = model_facts(model)
    assert facts["keras_matmul_layers"] == 3  # attention, wide, head: not its 4 EinsumDense
    assert facts["keras_layers_off_policy"] == [
        {"name": "attention", "type": "MultiHeadAttention", "compute_dtype": "float32"},
        {"name": "wide", "type": "Dense", "compute_dtype": "float32"},
    ]
    found = keras_policy.keras_policy(keras_run(**facts))
    assert found.title.startswith("2 of 3 matmul layer(s) compute in float32")


@pytest.mark.tensorflow
def test_a_real_float_id_model_gets_both_critical_verdicts_first() -> None:
    keras = pytest.importorskip("keras")
    from accelkit.keras import checks
    from accelkit.keras.facts import model_facts

    with global_policy_kept():
        keras.mixed_precision.set_global_policy("mixed_float16")
        inputs = keras.Input((8,), name="ids")
        x = keras.layers.Lambda(lambda t: t, name="scale")(inputs)
        x = keras.layers.Embedding(20000, 8, name="emb")(x)
        x = keras.layers.GlobalAveragePooling1D()(x)
        model = keras.Model(inputs, keras.layers.Dense(2, name="logits")(x))
        facts = {
            **model_facts(model),
            **checks.mixed_precision_facts(model),
            "ids_over_float16": checks.ids_exceed_float16(
                np.array([[1, 2049, 12345, 5, 6, 7, 8, 9]]), model
            ),
        }
    found = advise(None, None, measured_on(CPU, framework="tensorflow", facts=facts))
    assert ids(found)[:2] == ["float_ids", "float16_outputs"]
    assert found[0].evidence["cast_by"] == "scale"
    assert found[0].evidence["first_batch_changed"] == "2 of 8"


@pytest.mark.torch
def test_a_torch_batch_cast_to_bfloat16_is_found_and_integers_are_not() -> None:
    torch = pytest.importorskip("torch")
    from accelkit.torch.measuring.facts import half_integer_inputs

    ids_ = torch.tensor([[1, 7, 300, 12345, 19999]])
    batch = {"input_ids": ids_, "attention_mask": torch.ones(1, 5), "labels": ids_}
    cast = {k: v.to(torch.bfloat16) for k, v in batch.items()}  # the bug
    found = half_integer_inputs(cast)
    assert [f["input"] for f in found] == ["input_ids", "labels"]
    assert found[0]["max"] == 19968.0  # 19999 in bfloat16
    assert half_integer_inputs(batch) == []
    assert half_integer_inputs((torch.randn(4, 8).half() * 5000,)) == []  # features
    verdicts = advise(None, None, measured_on(CPU, facts={"half_integer_inputs": found}))
    assert ids(verdicts) == ["half_ids", "half_ids"]
