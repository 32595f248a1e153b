"""accelkit.hf.AccelkitCallback(tune=True) runs the model's forward and the Trainer's
compute_loss exactly as often as the Trainer does (issue 35): the FLOP count is taken on
the first optimizer step as it trains, and tune's check runs on copies of the model."""

from __future__ import annotations

import tempfile
from typing import Any

import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from accelkit.hf import AccelkitCallback
from accelkit.torch.tuning import registry

from ..helpers.compiling import compiled_as

ACCUMULATE = 2
STEPS = registry.trial_steps(1, cuda=False) + 2


class Annealed(transformers.GPT2LMHeadModel):
    """A tiny GPT-2 whose loss weight is annealed by its own forward's call counter."""

    calls = 0

    def forward(self, input_ids: Any = None, labels: Any = None, **kwargs: Any) -> Any:
        self.calls += 1
        output = super().forward(input_ids=input_ids, labels=labels, **kwargs)
        output["loss"] = output["loss"] * (0.97**self.calls)
        return output


class Counting(transformers.Trainer):
    """A Trainer whose compute_loss counts its calls."""

    computed = 0

    def compute_loss(self, model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        self.computed += 1
        return super().compute_loss(model, inputs, *args, **kwargs)


def train(callbacks: list[Any]) -> tuple[Annealed, Counting]:
    config = transformers.GPT2Config(
        n_layer=1, n_embd=32, n_head=2, vocab_size=100, n_positions=16, bos_token_id=0,
        eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = Annealed(config)
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 100, (4 * ACCUMULATE * STEPS, 16), generator=generator)
    args = transformers.TrainingArguments(
        output_dir=tempfile.mkdtemp(), max_steps=STEPS, use_cpu=True, report_to=[],
        per_device_train_batch_size=4, gradient_accumulation_steps=ACCUMULATE,
        disable_tqdm=True, save_strategy="no", optim="adamw_torch", seed=0,
    )  # fmt: skip
    rows = [{"input_ids": row, "labels": row} for row in ids]
    trainer = Counting(model, args, train_dataset=rows, callbacks=callbacks)
    trainer.train()
    return model, trainer


def test_tune_runs_forward_and_compute_loss_once_per_micro_batch_as_without_it() -> None:
    """Before: the FLOP count's pass and the check's eager and compiled passes ran the
    model's forward once more each, moving its counter ahead of the Trainer's."""
    callback = AccelkitCallback(tune=True, warmup=1)
    with compiled_as():
        tuned, trainer = train([callback])
    micro_batches = STEPS * ACCUMULATE
    assert tuned.calls == trainer.computed == micro_batches
    assert callback.report.steps == trainer.state.global_step == STEPS
    checked = [c for c in callback.report.tuning["candidates"] if c.get("check")]
    assert checked, callback.report.tuning["candidates"]  # the check ran, on copies
    assert callback.report.flops_per_step > 0  # counted on the first step as it trained

    plain, plain_trainer = train([])
    assert plain.calls == plain_trainer.computed == micro_batches
    for got, want in zip(tuned.parameters(), plain.parameters(), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def test_the_first_steps_flops_are_counted_as_it_trains_all_its_micro_batches() -> None:
    """One step of ``ACCUMULATE`` micro-batches counts as much as the same model's step
    over one micro-batch of ``ACCUMULATE`` times the rows, and the model's forward ran
    only the Trainer's ``ACCUMULATE`` times in that step."""
    from accelkit.profiling.flops_torch import count_train_step_flops

    callback = AccelkitCallback(tune=False, warmup=1)
    model, _ = train([callback])
    reference = transformers.GPT2LMHeadModel(model.config)
    ids = torch.randint(0, 100, (4, 16))
    one = count_train_step_flops(reference, {"input_ids": ids, "labels": ids}).total
    assert callback.report.flops_per_step == ACCUMULATE * one
    assert model.calls == STEPS * ACCUMULATE
