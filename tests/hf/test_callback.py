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
from accelkit.profiling.options import MeterOptions

from ..helpers.torch_data import CPU_PLAN
from ..helpers.transformers_models import gpt2
from .runs import BATCH, LENGTH, VOCAB, train


def test_figures_reach_the_log_history_and_the_report(tmp_path) -> None:
    callback = AccelkitCallback(plan=CPU_PLAN, warmup=1)
    trainer = train(tmp_path, callback)
    logged = [e for e in trainer.state.log_history if "accelkit/samples_per_second" in e]
    assert [e["step"] for e in logged] == [4, 8, 12]  # each log; none after the last step
    final = trainer.state.log_history[-1]
    assert "train_runtime" in final and final["accelkit/run/flops_per_step"] > 0
    assert final["accelkit/run/evaluation_share"] == 0.0
    assert "accelkit/samples_per_second" not in final  # no step since the last log
    for window in logged:
        # the figures of exactly the steps since the last log: BATCH samples a step
        assert window["accelkit/samples_per_second"] * window["accelkit/step_time_s"] == (
            pytest.approx(BATCH)
        )
        assert window["accelkit/tokens_per_second"] == pytest.approx(
            window["accelkit/samples_per_second"] * LENGTH
        )
        assert 0.0 <= window["accelkit/input_wait_share"] < 1.0
        assert window["accelkit/achieved_tflops"] > 0 and "accelkit/step_seconds" not in window
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
    trainer = train(tmp_path, callback, gradient_accumulation_steps=2, max_steps=5)
    assert callback.report.steps == trainer.state.global_step == 5
    assert callback.meter.facts["batch_size"] == 2 * BATCH
    single = AccelkitCallback(plan=CPU_PLAN)
    train(tmp_path, single, max_steps=3)
    assert callback.report.flops_per_step == pytest.approx(2 * single.report.flops_per_step)


def test_each_train_call_is_measured_afresh(tmp_path) -> None:
    callback = AccelkitCallback(plan=CPU_PLAN, warmup=1)
    run = train(tmp_path, callback, max_steps=6)
    first = callback.report
    with callback:
        run.train()
    assert callback.report is not first
    assert callback.report.steps == first.steps == 6


class _Broken(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = gpt2(vocab=VOCAB, context=LENGTH)

    def forward(self, **batch):
        raise RuntimeError("the user's model failed")


def test_the_users_error_passes_through_and_the_sampler_stops(tmp_path) -> None:
    callback = AccelkitCallback(plan=CPU_PLAN)
    with pytest.raises(RuntimeError, match="the user's model failed"):
        train(tmp_path, callback, model=_Broken(), remove_unused_columns=False)
    assert not any(t.name == "accelkit-nvml" for t in threading.enumerate())
    assert callback.report is None


def test_options_are_checked_when_the_callback_is_built() -> None:
    with pytest.raises(ValueError, match="window=0"):
        AccelkitCallback(window=0)
    with pytest.raises(TypeError, match=r"logging_steps.*valid ones are plan"):
        AccelkitCallback(logging_steps=5)
    assert AccelkitCallback().options == MeterOptions()


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
