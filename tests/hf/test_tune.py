"""AccelkitCallback(tune=...) in a real Hugging Face Trainer (CPU, a tiny GPT-2): the trials
run on the Trainer's own first optimizer steps; the Trainer's own compile is respected."""

from __future__ import annotations

import tempfile
from typing import Any

import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from accelkit.hf import AccelkitCallback
from accelkit.torch.tuning import registry, trials

from ..helpers.compiling import (
    backward_refusing_new_shapes,
    compiled_as,
    graphs_holding_a_pool,
    no_gradients,
)
from ..helpers.tuning_record import graphs_trial, taken

STEPS = registry.trial_steps(1, cuda=False) + 4


def train(
    tune: Any = True, collate: Any = None, model_class: Any = None, **arguments: Any
) -> tuple[AccelkitCallback, Any]:
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100,
                                     n_positions=16, bos_token_id=0, eos_token_id=0)  # fmt: skip
    torch.manual_seed(0)
    model = (model_class or transformers.GPT2LMHeadModel)(config)
    rows = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 100, (8 * STEPS, 16))]
    args = transformers.TrainingArguments(
        output_dir=tempfile.mkdtemp(), max_steps=STEPS, use_cpu=True, report_to=[],
        per_device_train_batch_size=8, disable_tqdm=True, save_strategy="no", **arguments,
    )  # fmt: skip
    callback = AccelkitCallback(tune=tune, warmup=1)
    transformers.Trainer(
        model, args, train_dataset=rows, data_collator=collate, callbacks=[callback]
    ).train()
    return callback, model


def test_tune_runs_the_trials_on_the_trainers_first_steps() -> None:
    with compiled_as():
        callback, model = train(optim="adamw_torch")
    tuning = callback.report.tuning
    assert tuning["decision"] == "tuned"
    assert tuning["steps"] == taken(tuning["candidates"]) <= registry.trial_steps(1, cuda=False)
    names = [c["name"].split("+")[0] for c in tuning["candidates"]]
    assert names == ["eager", "eager", "compile", "cudagraphs", "max-autotune"]  # last two: GPU
    compiled = tuning["candidates"][2]
    assert compiled["status"] in ("chosen", "slower"), compiled["why"]
    assert ("forward" in vars(model)) == (compiled["status"] == "chosen")
    assert callback.report.steps == STEPS


def test_a_compiled_forward_without_gradients_is_dropped_before_it_trains() -> None:
    def wrong(output: Any) -> Any:
        output["loss"] = no_gradients(output["loss"])
        return output

    with compiled_as(wrong):
        callback, model = train()
    compiled = next(c for c in callback.report.tuning["candidates"] if c["settings"].get("compile"))
    assert compiled["status"] == "failed" and "gradients" in compiled["why"], compiled["why"]
    assert "forward" not in vars(model)  # the compiled forward is off: the model's own runs


def test_a_new_shapes_backward_that_fails_to_compile_runs_eagerly_and_training_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: the kept compiled forward, recompiled for the shorter rows of the last
    batches, could not have its backward pass lowered; AOT autograd lowers it at the first
    backward pass, so the error came from the Trainer's ``loss.backward()`` and stopped
    the training. Now the backward pass is lowered as the forward compiles, and a forward
    that fails to compile after the check runs eagerly."""
    faster = trials.clearly_faster
    monkeypatch.setattr(
        trials, "clearly_faster", lambda t, best: bool(t.settings.get("compile")) or faster(t, best)
    )
    batches = []

    def shorter_at_the_end(rows: list[dict[str, Any]]) -> dict[str, Any]:
        batches.append(transformers.default_data_collator(rows))
        late = len(batches) > STEPS - 2
        return {key: value[:, :12] if late else value for key, value in batches[-1].items()}

    with compiled_as(backend=backward_refusing_new_shapes()):
        callback, model = train(collate=shorter_at_the_end)
    assert callback.report.tuning["compile"], callback.report.tuning
    assert "forward" in vars(model) and callback.report.steps == STEPS


def test_an_eager_bests_error_in_a_graphs_candidates_rounds_ends_the_trial_not_the_training(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: with compile not kept, the best so far ran its units of the CUDA-graph
    candidate's paired rounds through the model's eager forward, where no compiled
    wrapper stood to hand its error to the trials: out of memory beside the graphs' pool
    stopped the training. Now the forward runs guarded while a candidate's trial runs:
    the candidate is dropped, its pool given back, and the forward runs again."""
    pool = graphs_holding_a_pool(monkeypatch, beside_eager=True)

    class NeedsThePool(transformers.GPT2LMHeadModel):
        def forward(self, input_ids: Any = None, labels: Any = None, **kwargs: Any) -> Any:
            pool.allocate()  # named as GPT-2 names them: the Trainer keeps those columns
            return super().forward(input_ids=input_ids, labels=labels, **kwargs)

    try:
        callback, model = train(model_class=NeedsThePool)
    finally:
        torch._dynamo.reset()
    graphed = graphs_trial(callback.report)
    assert graphed["status"] == "failed" and graphed["why"] == "out of memory", graphed
    assert pool.failed == pool.released == 1  # once, and its pool went back at once
    assert callback.report.steps == STEPS and "forward" not in vars(model)


def test_the_trainers_own_compile_is_kept_not_tried() -> None:
    with compiled_as():
        callback, _ = train(torch_compile=True)
    skipped = {c["name"]: c["why"] for c in callback.report.tuning["candidates"]}
    assert (
        skipped["compile"]
        == "TrainingArguments(torch_compile=True): the Trainer compiles the model"
    )
