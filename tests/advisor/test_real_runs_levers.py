"""The advisor's larger levers on real `accelkit.torch.fit` runs: the optimizer fact and
the vocabulary verdict on this CPU; the compile and fused-optimizer verdicts where they
apply, on a GPU (their plain-data tests are test_compile_rule.py, test_optimizer_rule.py)."""

from __future__ import annotations

import functools

import pytest

import accelkit
from accelkit.advisor import Severity, advise
from accelkit.hardware import detect
from accelkit.planning import Request, plan

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from ..helpers import torch_data
from ..helpers.torch_data import CPU_PLAN, batches, mlp


def verdicts(report):
    return {a["id"]: a for a in report.advice}


def test_a_for_loop_adamw_is_in_the_report_facts() -> None:
    report = torch_data.train(
        mlp(256, 512, 256, 8),
        batches(n=12),
        device="cpu",
        optimizer=functools.partial(torch.optim.AdamW, foreach=False),
    )
    assert report.facts["optimizer"] == {
        "type": "AdamW",
        "implementation": "for-loop",
        "foreach_available": False,
        "fused_available": True,
        "set_by_user": True,
        "parameter_tensors": 6,
        "param_groups": 1,
    }
    assert report.facts["compiled"] is False and report.facts["model_compiled"] is False
    # Both rules need a GPU: a CPU step has no kernel launches to save.
    assert "fused_optimizer" not in verdicts(report) and "compile" not in verdicts(report)
    assert report.to_dict()["facts"]["optimizer"]["implementation"] == "for-loop"


class TinyLM(torch.nn.Module):
    """GPT-2's vocabulary around a 32-wide model: the embedding and an untied head."""

    def __init__(self, vocab: int = 50257, width: int = 32) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.wte = torch.nn.Embedding(vocab, width)
        self.lm_head = torch.nn.Linear(width, vocab, bias=False)

    def forward(self, ids):
        return self.lm_head(self.wte(ids))


def lm_batches(n: int = 6, batch: int = 4, tokens: int = 16, vocab: int = 50257):
    generator = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        ids = torch.randint(0, vocab, (batch, tokens + 1), generator=generator)
        out.append((ids[:, :-1], ids[:, 1:]))
    return out


def next_token_loss(logits, targets):
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())


def test_gpt2s_vocabulary_gets_the_multiple_of_64_on_a_real_run() -> None:
    model = TinyLM()
    report = accelkit.torch.fit(
        model,
        lm_batches(),
        torch.optim.AdamW(model.parameters()),
        next_token_loss,
        plan=CPU_PLAN,
        progress=False,
        device="cpu",
    )
    found = verdicts(report)["alignment"]
    assert found["evidence"]["vocabulary"] == [
        "wte (Embedding num_embeddings=50257)",
        "lm_head (Linear out_features=50257)",
    ]
    assert found["title"].startswith("vocabulary of 50,257 not a multiple of 64 (50,257 -> 50,304)")
    assert found["severity"] == "info"  # fp32 on a CPU: no tensor cores here
    assert "1.19 to 1.24 it/s" in found["expected_gain"]
    # The same run advised for an H100 in bf16: on tensor cores it is a warning.
    h100 = {a.id: a for a in advise(None, accelkit.plan_for("H100 SXM"), report)}
    assert h100["alignment"].severity is Severity.WARNING


@pytest.mark.gpu
def test_an_eager_gpu_run_with_a_for_loop_optimizer_gets_both_levers() -> None:
    on_gpu = plan(detect(), Request(framework="torch", precision="bf16"))
    model = mlp(1024, 4096, 4096, 1024, 16)
    report = torch_data.train(
        model,
        batches(n=40, batch=256, dim=1024, classes=16),
        plan=on_gpu,
        device="cuda",
        tune=False,
        optimizer=functools.partial(torch.optim.AdamW, foreach=False),
    )
    assert report.device.startswith("cuda") and report.facts["compiled"] is False
    assert report.facts["optimizer"]["implementation"] == "for-loop"
    assert report.facts["optimizer"]["fused_available"] is True
    found = verdicts(report)
    assert found["fused_optimizer"]["action"].startswith(
        "torch.optim.AdamW(model.parameters(), ..., fused=True)"
    )
    assert found["fused_optimizer"]["evidence"]["optimizer.parameter_tensors"] == 8
    compile_ = found["compile"]
    assert "compile=True" in compile_["action"]
    assert compile_["expected_gain"].startswith(("estimate, about", "not estimated"))
