"""`accelkit.hf`: the callback on a real `Trainer` (tiny GPT-2 on the CPU) and
`training_arguments` for GPU and CPU plans."""

from __future__ import annotations

import threading

import pytest

import accelkit

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate", reason="the Trainer needs accelerate")
pytestmark = pytest.mark.torch

from accelkit.hf import AccelkitCallback, training_arguments

from ..helpers.torch_data import CPU_PLAN
from ..helpers.transformers_models import gpt2, lm_batches

BATCH, LENGTH, VOCAB = 4, 32, 256


class _Rows(torch.utils.data.Dataset):
    """Dict rows as a tokenized dataset gives them, the last 8 positions padding."""

    def __init__(self, rows: int = 48) -> None:
        batches = lm_batches(rows // BATCH, BATCH, LENGTH, VOCAB, real=[LENGTH - 8] * BATCH)
        self.rows = [{k: v[i] for k, v in b.items()} for b in batches for i in range(BATCH)]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict:
        return self.rows[index]


def _train(tmp_path, callback, model=None, **arguments):
    arguments = {"max_steps": 12, "logging_steps": 4, **arguments}
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        report_to=[],
        use_cpu=True,
        per_device_train_batch_size=BATCH,
        save_strategy="no",
        **arguments,
    )
    trainer = transformers.Trainer(
        model=model or gpt2(vocab=VOCAB, context=LENGTH),
        args=args,
        train_dataset=_Rows(),
        callbacks=[callback],
    )
    with callback:
        trainer.train()
    return trainer


def test_figures_reach_the_log_history_and_the_report(tmp_path) -> None:
    callback = AccelkitCallback(plan=CPU_PLAN)
    trainer = _train(tmp_path, callback)
    logged = [e for e in trainer.state.log_history if "accelkit/samples_per_second" in e]
    assert len(logged) >= 2  # windows, then the whole run with train_runtime
    assert "train_runtime" in logged[-1] and "accelkit/flops_per_step" in logged[-1]
    assert logged[0]["accelkit/tokens_per_second"] == pytest.approx(
        logged[0]["accelkit/samples_per_second"] * LENGTH
    )
    report = callback.report
    assert report.steps == trainer.state.global_step == 12
    assert report.samples_per_second > 0
    assert report.tokens_per_second == pytest.approx(report.samples_per_second * LENGTH)
    assert report.real_tokens_per_second == pytest.approx(report.tokens_per_second * 24 / 32)
    # 6·N·T (PaLM appendix B) + 12·L·T²·d attention, over the batch's tokens; the tied
    # head counts once in N, the embeddings (lookups, no matmul) not at all.
    model = trainer.model
    n = sum(p.numel() for p in model.transformer.h.parameters()) + VOCAB * 64
    expected = BATCH * (6 * n * LENGTH + 12 * 2 * LENGTH * LENGTH * 64)
    assert report.flops_per_step == pytest.approx(expected, rel=0.1)
    assert report.advice is not None
    assert callback.meter.facts["batch_size"] == BATCH


def test_gradient_accumulation_counts_every_micro_batch(tmp_path) -> None:
    callback = AccelkitCallback(plan=CPU_PLAN)
    trainer = _train(tmp_path, callback, gradient_accumulation_steps=2, max_steps=5)
    assert callback.report.steps == trainer.state.global_step == 5
    assert callback.meter.facts["batch_size"] == 2 * BATCH
    single = AccelkitCallback(plan=CPU_PLAN)
    _train(tmp_path, single, max_steps=3)
    assert callback.report.flops_per_step == pytest.approx(2 * single.report.flops_per_step)


class _Broken(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = gpt2(vocab=VOCAB, context=LENGTH)

    def forward(self, **batch):
        raise RuntimeError("the user's model failed")


def test_the_users_error_passes_through_and_the_sampler_stops(tmp_path) -> None:
    callback = AccelkitCallback(plan=CPU_PLAN)
    with pytest.raises(RuntimeError, match="the user's model failed"):
        _train(tmp_path, callback, model=_Broken(), remove_unused_columns=False)
    assert not any(t.name == "accelkit-nvml" for t in threading.enumerate())
    assert callback.report is None


@pytest.mark.parametrize(
    ("gpu", "bf16", "fp16", "tf32"),
    [("A100-SXM4-80GB", True, False, True), ("T4", False, True, None), (None, False, False, None)],
)
def test_training_arguments_follow_the_plan(gpu, bf16, fp16, tf32) -> None:
    fields = training_arguments(accelkit.plan_for(gpu))
    assert (fields["bf16"], fields["fp16"], fields["tf32"]) == (bf16, fp16, tf32)
    assert fields["dataloader_pin_memory"] is (gpu is not None)
    assert fields["torch_compile"] is False
    known = {f.name for f in __import__("dataclasses").fields(transformers.TrainingArguments)}
    assert set(fields) <= known


def test_training_arguments_of_a_cpu_plan_construct(tmp_path) -> None:
    args = transformers.TrainingArguments(
        **training_arguments(accelkit.plan_for(None)), output_dir=str(tmp_path), use_cpu=True
    )
    assert not args.bf16 and not args.fp16
