"""Each step's FLOPs with length-bucketed batches on a GPU (issue 37): a BERT masked-LM
trained by `accelkit.torch.fit` in bf16 on batches of four lengths, and a GPT-2 `Meter`
loop with dynamic padding; every steady step's FLOPs against an independent count of its
batch (`count_train_step_flops` on the batch whole, on the same device)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import accelkit
from accelkit.profiling.flops_torch import count_train_step_flops
from accelkit.torch.measuring.meter import Meter

from ..helpers.transformers_models import bert, gpt2

pytestmark = pytest.mark.torch
VOCAB = 1000


def _batch(length: int, size: int, seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, VOCAB, (size, length), generator=generator).cuda()
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}


@pytest.mark.gpu
def test_a_bert_mlm_with_length_buckets_counts_each_steps_own_length_on_the_gpu() -> None:
    model = bert("masked_lm", layers=4, dim=256, heads=4, vocab=VOCAB, context=512).cuda()
    # Two warm-up steps, then eight whole windows of four: the report's mean is theirs.
    lengths = [64, 512] + [64, 512, 128, 256, 512, 64, 128, 256] * 4
    loader = [_batch(n, 16, seed) for seed, n in enumerate(lengths)]
    report = accelkit.torch.fit(
        model,
        loader,
        torch.optim.AdamW(model.parameters(), lr=1e-4),
        None,
        plan=accelkit.plan_for("H200"),
        tune=False,
        warmup=2,
        window=4,
        progress=False,
    )
    counts = [count_train_step_flops(model, batch).total for batch in loader[2:]]
    assert report.flops_per_step == pytest.approx(sum(counts) / len(counts), rel=0.02)
    assert "own batches' shapes" in report.notes["flops_per_step"]


@pytest.mark.gpu
def test_a_gpt2_meter_loop_with_dynamic_padding_on_the_gpu() -> None:
    model = gpt2(layers=4, dim=256, heads=4, vocab=VOCAB, context=512).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batches = [_batch(16, 8, 0)] + [_batch(16 + 31 * i, 8, i) for i in range(1, 16)]
    meter = Meter(model, warmup=1, window=1, sample_gpu=False)
    windows = []
    with meter:
        for batch in batches:
            with meter.step(batch), torch.autocast("cuda", dtype=torch.bfloat16):
                model(**batch).loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            taken = meter.recorder.clock.take()
            if taken.steps:
                windows.append(taken.flops.model if taken.flops is not None else None)
    counts = [count_train_step_flops(model, batch).total for batch in batches[1:]]
    assert windows == pytest.approx(counts, rel=0.02)
    assert "fitted in the sequence length" in meter.report().notes["flops_per_step"]
