"""tune's float8 lever on a GPU with float8 tensor cores (compute capability >= 8.9,
torchao installed): real float8 matmuls, checked against the bf16 step, and the report's
float8 share counted from the kept step (marked ``gpu``: run on the GPU machine)."""

from __future__ import annotations

from typing import Any

import pytest

import accelkit

pytestmark = [pytest.mark.torch, pytest.mark.gpu]
torch = pytest.importorskip("torch")
pytest.importorskip("torchao")

from accelkit.torch.tuning import float8, registry


@pytest.fixture(autouse=True)
def float8_tensor_cores() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU")
    why = float8.unsupported(torch, torch.device("cuda", 0))
    if why:
        pytest.skip(why)


def wide() -> Any:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(4096, 8192), torch.nn.GELU(), torch.nn.Linear(8192, 4096),
        torch.nn.GELU(), torch.nn.Linear(4096, 16),
    )  # fmt: skip


def test_a_fit_tries_real_float8_and_reports_its_share_where_kept() -> None:
    # compile=True: the script compiled, so float8 is tried on top whatever compile's trial
    # would have said of three large matmuls.
    plan = accelkit.auto_configure(framework="torch", verbose=False)
    model = wide()
    steps = registry.trial_steps(1, float8=True) + 10
    data = [(torch.randn(8192, 4096), torch.randint(0, 16, (8192,))) for _ in range(4)] * steps
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    # An iterator, whose length fit cannot know: the run is `steps` long, so that float8's
    # compile pays, and ends where the batches do.
    report = accelkit.torch.fit(
        model, iter(data[:steps]), optimizer, torch.nn.CrossEntropyLoss(), plan=plan,
        progress=False, tune=True, steps=100_000, compile=True,
    )  # fmt: skip
    tried = next(c for c in report.tuning["candidates"] if c["name"].endswith("float8"))
    assert tried["status"] != "skipped", tried["why"]
    assert tried["check"] is not None and tried["check"]["failed"] is None, tried["why"]
    kept = tried["status"] == "chosen"
    assert (type(model[0]).__name__ == "Float8Linear") is kept
    assert type(model[4]) is torch.nn.Linear  # the head
    if kept:
        # Two of the three linear layers' matmuls: all but the head's 4096 x 16.
        share = (4096 * 8192 * 2) / (4096 * 8192 * 2 + 4096 * 16)
        assert report.float8_share == pytest.approx(share, rel=1e-3)
        assert report.precision_mfu is not None and report.precision_mfu < report.mfu
    else:
        assert report.float8_share is None


def test_the_hugging_face_callback_tries_real_float8_on_the_trainers_compile(tmp_path) -> None:
    # TrainingArguments(torch_compile=True): the Trainer's compile is the baseline, and
    # float8 is tried on top of it (tests/torch/test_float8_doors.py on the CPU).
    transformers = pytest.importorskip("transformers")
    from accelkit.hf import AccelkitCallback, training_arguments

    config = transformers.LlamaConfig(
        hidden_size=1024, intermediate_size=4096, num_hidden_layers=2, num_attention_heads=8,
        num_key_value_heads=8, vocab_size=1024, max_position_embeddings=512,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    plan = accelkit.auto_configure(framework="torch", verbose=False)
    steps = registry.trial_steps(1, float8=True) + 10
    rows = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 1024, (8 * steps, 512))]
    # told of a long run, so that float8's compile pays (priced by the Trainer's compile in
    # the baseline's first unit), and stopped after `steps`, as early stopping would
    arguments = transformers.TrainingArguments(
        output_dir=str(tmp_path), max_steps=100_000, report_to=[],
        per_device_train_batch_size=8, disable_tqdm=True, save_strategy="no",
        **{**training_arguments(plan, model=model), "torch_compile": True},
    )  # fmt: skip

    class Stop(transformers.TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            control.should_training_stop = state.global_step >= steps

    callback = AccelkitCallback(tune=True)
    trainer = transformers.Trainer(
        model, arguments, train_dataset=rows, callbacks=[callback, Stop()]
    )
    trainer.train()
    candidates = callback.report.tuning["candidates"]
    assert candidates[0]["name"].startswith("compile"), candidates[0]
    tried = next(c for c in candidates if c["settings"].get("float8"))
    assert tried["status"] != "skipped", tried["why"]
    assert tried["check"] is not None and tried["check"]["failed"] is None, tried["why"]
    kept = tried["status"] == "chosen"
    converted = [m for m in model.modules() if type(m).__name__ == "Float8Linear"]
    assert bool(converted) is kept
    assert (callback.report.float8_share is not None) is kept
