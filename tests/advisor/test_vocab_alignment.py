"""The alignment verdict for a vocabulary: the multiple that matters on tensor cores is
64 (nanoGPT pads GPT-2's 50,257 to 50,304), with the effect it cites; other dimensions
keep the multiple-of-8 check."""

from __future__ import annotations

import pytest

from accelkit import plan_for, what_if
from accelkit.advisor import Severity, advise
from accelkit.advisor.context import Context
from accelkit.advisor.rules import alignment
from accelkit.hardware.info import HardwareInfo

from .helpers import measured_on

H100 = what_if("H100 SXM")
CPU = HardwareInfo(source="cpu")


def gpt2_layers(vocab=50257, head="lm_head", kind="Linear"):
    return [
        {
            "name": "transformer.wte",
            "type": "Embedding",
            "dims": {"num_embeddings": vocab, "embedding_dim": 768},
        },
        {
            "name": "transformer.h.0.mlp.c_fc",
            "type": "Linear",
            "dims": {"in_features": 768, "out_features": 3072},
        },
        {"name": head, "type": kind, "dims": {"in_features": 768, "out_features": vocab}},
    ]


def verdict(layers, hardware=H100, dtype="bf16", **figures):
    m = measured_on(hardware, matmul_dtype=dtype, facts={"layers": layers}, **figures)
    return alignment.alignment(Context.build(hardware, None, m))


def test_gpt2s_vocabulary_is_padded_to_a_multiple_of_64_with_the_cited_effect() -> None:
    found = verdict(gpt2_layers())
    assert found.severity is Severity.WARNING  # 50,257 is not even a multiple of 8
    assert found.title.startswith(
        "vocabulary of 50,257 not a multiple of 64 (50,257 -> 50,304): transformer.wte"
    )
    assert found.evidence["vocabulary"] == [
        "transformer.wte (Embedding num_embeddings=50257)",
        "lm_head (Linear out_features=50257)",
    ]
    assert found.evidence["vocabulary_multiple"] == 64
    assert "pad_to_multiple_of=64" in found.action and "nn.Linear(d, 50304)" in found.action
    gain = found.expected_gain
    assert "50257->50304 (+0.09%)" in gain
    assert "1.19 to 1.24 it/s" in gain and "nanoPALM/pull/6" in gain
    assert "karpathy/nanoGPT model.py" in gain and "128 bytes" in gain
    assert found.speedup is None  # cited, not measured on this run


def test_a_vocabulary_that_is_a_multiple_of_8_but_not_64_is_info() -> None:
    found = verdict(gpt2_layers(vocab=50264))
    assert found.severity is Severity.INFO
    assert "50,264 -> 50,304" in found.title


def test_a_padded_vocabulary_is_quiet() -> None:
    assert verdict(gpt2_layers(vocab=50304)) is None


def test_fp8_wants_128_for_the_vocabulary() -> None:
    assert verdict(gpt2_layers(vocab=32064)) is None  # 501 x 64
    found = verdict(gpt2_layers(vocab=32064), dtype="fp8")
    assert found.evidence["vocabulary_multiple"] == 128 and "32,064 -> 32,128" in found.title


def test_an_untied_head_is_recognised_by_its_size_and_keras_layers_too() -> None:
    keras_layers = [
        {"name": "embed", "type": "Embedding", "dims": {"input_dim": 20001, "output_dim": 128}},
        {"name": "logits", "type": "Dense", "dims": {"in_features": 128, "out_features": 20001}},
    ]
    m = measured_on(
        H100, framework="tensorflow", matmul_dtype="fp16", facts={"layers": keras_layers}
    )
    found = alignment.alignment(Context.build(H100, None, m))
    assert found.evidence["vocabulary"] == [
        "embed (Embedding input_dim=20001)",
        "logits (Dense out_features=20001)",
    ]
    assert "keras.layers.Embedding(20032, d)" in found.action


def test_other_dimensions_keep_the_multiple_of_8() -> None:
    layers = [
        *gpt2_layers(vocab=50304),
        {
            "name": "classifier",
            "type": "Linear",
            "dims": {"in_features": 768, "out_features": 1001},
        },
    ]
    found = verdict(layers)
    assert "vocabulary" not in found.evidence
    assert (
        found.title == "1 matmul dimension(s) not a multiple of 8: classifier (Linear "
        "out_features=1001)"
    )
    both = verdict(gpt2_layers() + layers[-1:])
    assert "; and 1 matmul dimension(s) not a multiple of 8: classifier" in both.title
    assert "1001 -> 1008" in both.action and "50304" in both.action


def test_on_the_cpu_it_is_info_and_a_what_if_h100_makes_it_a_warning() -> None:
    m = measured_on(CPU, matmul_dtype="fp32", facts={"layers": gpt2_layers()})
    here = alignment.alignment(Context.build(CPU, None, m))
    assert here.severity is Severity.INFO and "tensor cores" in here.title
    there = {a.id: a for a in advise(None, plan_for("H100 SXM"), m)}["alignment"]
    assert there.severity is Severity.WARNING


@pytest.mark.parametrize("name", ["lm_head", "model.lm_head"])
def test_a_head_named_lm_head_counts_as_the_vocabulary_without_an_embedding(name) -> None:
    found = verdict(
        [{"name": name, "type": "Linear", "dims": {"in_features": 512, "out_features": 32001}}]
    )
    assert found.evidence["vocabulary"] == [f"{name} (Linear out_features=32001)"]
