"""The float8 lever in every door of tune (issue 36, item 2): `accelkit.torch.tune` for a
hand-written loop, the Lightning callback on a LightningModule's compiled training_step,
the Hugging Face callback on a `Trainer`'s compiled forward; each tries the same lever on
top of the compiled step kept, checks it against that step with float8's tolerance, and
leaves the layers converted where kept, as they were where not.

On the CPU, torchao emulates the float8 matmuls (tests/torch/test_float8.py says how), and
two things a GPU decides are decided here instead: `float8.unsupported` is opened (no
float8 tensor cores to ask), and which candidate is faster is fixed by the test
(`faster`), since on the CPU a compiled step with the eager backend and emulated float8
only run slower, and float8 is tried on a compiled step alone. The run's length is not
weighed (`float8.unpaid`: its own test is in test_float8.py).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from typing import Any

import pytest

import accelkit

torch = pytest.importorskip("torch")
pytest.importorskip("torchao")
pytestmark = pytest.mark.torch

from accelkit.torch.tuning import float8, registry, trials

from ..helpers.compiling import compiled_as
from ..helpers.torch_data import CPU_PLAN

WIDE = 4096 + 16  # past torchao's size filter
STEPS = registry.trial_steps(1, cuda=False, float8=True) + 6


@pytest.fixture
def float8_here(monkeypatch: pytest.MonkeyPatch) -> Callable[[bool], None]:
    """Float8 tried on the CPU; call it with whether float8 is to be kept: every other
    candidate is taken as faster, so that compile is kept and float8 tried on it."""
    monkeypatch.setattr(float8, "unsupported", lambda torch, device: None)
    monkeypatch.setattr(float8, "unpaid", lambda engine: None)

    def faster(kept: bool) -> None:
        def judged(trial: Any, best: Any) -> bool:
            return kept or not trial.settings.get("float8")

        monkeypatch.setattr(trials, "clearly_faster", judged)

    return faster


def wide() -> Any:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(WIDE, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))


def wide_data(count: int) -> Any:
    generator = torch.Generator().manual_seed(1)
    return torch.utils.data.TensorDataset(
        torch.randn(16 * count, WIDE, generator=generator),
        torch.randint(0, 8, (16 * count,), generator=generator),
    )


def float8_trial(tuning: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in tuning["candidates"] if c["settings"].get("float8"))


def assert_tried_and_checked(tuning: dict[str, Any], kept: bool) -> None:
    tried = float8_trial(tuning)
    assert tried["settings"]["compile"] is True  # on top of the compiled step kept
    assert tried["status"] == ("chosen" if kept else "slower"), tried["why"]
    check = tried["check"]
    assert check["failed"] is None and check["grad_limit"] == float8.TOLERANCE.grads
    assert 0 < check["grad_difference"] < float8.TOLERANCE.grads  # float8 moved them
    assert tuning["float8"] is kept


def assert_float8_share(report: Any, kept: bool, share: float | None = None) -> None:
    """A kept float8 step's FLOPs are counted again (the first step's count was bf16's):
    the report's float8 share is that of its matmuls (`share` where given), and none
    where float8 was not kept."""
    if not kept:
        assert report.float8_share is None
        return
    assert report.float8_share is not None and 0 < report.float8_share < 1
    if share is not None:
        assert report.float8_share == pytest.approx(share, rel=1e-3)


# -- accelkit.torch.tune, for a hand-written loop ---------------------------------------


@pytest.mark.parametrize("kept", [True, False])
def test_tune_for_a_hand_written_loop_tries_float8(float8_here, kept: bool) -> None:
    float8_here(kept)
    model = wide()
    first, head = model[0], model[2]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batches = iter(torch.utils.data.DataLoader(wide_data(STEPS), batch_size=16))
    with compiled_as():
        result = accelkit.torch.tune(
            model, batches, optimizer, torch.nn.CrossEntropyLoss(), plan=CPU_PLAN, device="cpu"
        )
    assert_tried_and_checked(result.to_dict(), kept)
    assert result.float8 is kept and result.compile is True
    # kept: the layer stays a Float8Linear on the same parameters; else the same object
    assert (type(model[0]).__name__ == "Float8Linear") is kept
    assert model[0].weight is first.weight and (kept or model[0] is first)
    assert model[2] is head  # the output head never converts
    x, y = next(batches)  # the loop goes on from the next batch with what was kept
    torch.nn.functional.cross_entropy(model(x), y).backward()
    assert first.weight.grad is not None


@pytest.mark.parametrize("kept", [True, False])
def test_a_fit_that_compiles_in_its_trials_counts_a_kept_float8_step_again(
    float8_here, kept: bool
) -> None:
    """Before: no float8 share where tune compiled and kept float8 in a fit (the 1B Llama
    on an H100 through `fit(tune=True)`): the meter counted the first step, and the kept
    step was counted again only where the loop had counted it (a script's compile)."""
    float8_here(kept)
    model = wide()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.utils.data.DataLoader(wide_data(STEPS), batch_size=16)
    with compiled_as():
        report = accelkit.torch.fit(
            model, data, optimizer, torch.nn.CrossEntropyLoss(), plan=CPU_PLAN,
            progress=False, tune=True,
        )  # fmt: skip
    assert_tried_and_checked(report.tuning, kept)
    assert_float8_share(report, kept, share=WIDE * 32 / (WIDE * 32 + 32 * 8))


# -- the Lightning callback ---------------------------------------------------------


pl = pytest.importorskip("lightning.pytorch")


class WideModule(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = wide()

    def training_step(self, batch: Any, index: int) -> Any:
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def lightning_fit(module: Any, compile_network: bool = False) -> Any:
    """`module` fitted on the wide data with `AccelkitCallback(tune=True)`; its report.
    `compile_network`: the script compiles its network first."""
    from accelkit.lightning import AccelkitCallback

    callback = AccelkitCallback(tune=True)
    trainer = pl.Trainer(max_epochs=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[callback])  # fmt: skip
    with compiled_as():
        if compile_network:
            module.net = torch.compile(module.net)
        trainer.fit(module, torch.utils.data.DataLoader(wide_data(STEPS), batch_size=16))
    return callback.report


@pytest.mark.parametrize("kept", [True, False])
def test_the_lightning_callback_tries_float8_on_the_compiled_training_step(
    float8_here, kept: bool
) -> None:
    float8_here(kept)
    module = WideModule()
    first = module.net[0]
    report = lightning_fit(module)
    assert_tried_and_checked(report.tuning, kept)
    assert float8_trial(report.tuning)["settings"]["compiled"] == "training_step"
    assert (type(module.net[0]).__name__ == "Float8Linear") is kept
    assert module.net[0].weight is first.weight and (kept or module.net[0] is first)
    assert report.steps == STEPS and torch.isfinite(torch.tensor(report.losses)).all()
    assert_float8_share(report, kept, share=WIDE * 32 / (WIDE * 32 + 32 * 8))


# -- the Hugging Face callback ------------------------------------------------------


transformers = pytest.importorskip("transformers")


def tiny_llama() -> Any:
    config = transformers.LlamaConfig(
        hidden_size=256, intermediate_size=WIDE, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=128, max_position_embeddings=64,
    )  # fmt: skip
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config)


def hf_train(model: Any, **arguments: Any) -> Any:
    """`model` trained by a `Trainer` with `AccelkitCallback(tune=True)`; its report.
    `arguments`: more `TrainingArguments`."""
    from accelkit.hf import AccelkitCallback

    rows = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 128, (8 * STEPS, 32))]
    training = transformers.TrainingArguments(
        output_dir=tempfile.mkdtemp(), max_steps=STEPS, use_cpu=True, report_to=[],
        per_device_train_batch_size=8, disable_tqdm=True, save_strategy="no",
        optim="adamw_torch", **arguments,
    )  # fmt: skip
    callback = AccelkitCallback(tune=True, warmup=1)
    with compiled_as():
        transformers.Trainer(model, training, train_dataset=rows, callbacks=[callback]).train()
    return callback.report


@pytest.mark.parametrize("kept", [True, False])
def test_the_hugging_face_callback_tries_float8_on_the_compiled_forward(
    float8_here, kept: bool
) -> None:
    float8_here(kept)
    model = tiny_llama()
    mlp = model.model.layers[0].mlp
    report = hf_train(model)
    assert_tried_and_checked(report.tuning, kept)
    # the MLP's three projections (256 <-> 4112) convert; attention's 256-wide ones and
    # the head stay
    converted = {name for name, m in model.named_modules() if type(m).__name__ == "Float8Linear"}
    assert len(converted) == (6 if kept else 0)
    assert type(mlp.down_proj).__name__ == ("Float8Linear" if kept else "Linear")
    assert type(model.lm_head) is torch.nn.Linear
    assert report.steps == STEPS
    assert_float8_share(report, kept)


# -- a compile the trainer or the script fixed ----------------------------------------


def assert_tried_on_the_given_compile(tuning: dict[str, Any]) -> None:
    baseline = tuning["candidates"][0]
    assert baseline["name"] == "compile" and baseline["status"] == "baseline"
    # its first unit compiled: the overhead that prices float8's own compile is recorded
    # (the first unit less the median; >= 0, whatever load did to the units after it)
    assert baseline["compile_seconds"] is not None
    tried = float8_trial(tuning)
    assert tried["status"] != "skipped", tried["why"]
    assert tried["check"]["failed"] is None


def test_float8_is_tried_on_the_compile_the_trainer_was_told_to_do(float8_here) -> None:
    """TrainingArguments(torch_compile=True): the Trainer compiles the model, so the
    baseline is compiled and float8 is tried on it (it said "the kept step is not
    compiled" and never tried float8 where people compile the Hugging Face way)."""
    report = hf_train(tiny_llama(), torch_compile=True)
    assert_tried_on_the_given_compile(report.tuning)


def test_float8_is_tried_on_a_network_the_script_compiled_in_lightning(float8_here) -> None:
    # The script compiled the LightningModule's network (torch.compile of the whole
    # LightningModule fails inside Lightning here, accelkit or not: dynamo's
    # "'method' object has no attribute '__dict__'", torch 2.13 with Lightning 2.6).
    report = lightning_fit(WideModule(), compile_network=True)
    assert_tried_on_the_given_compile(report.tuning)


def test_a_recount_that_fails_leaves_the_first_count_and_says_why() -> None:
    from accelkit.torch.measuring.meter import Meter

    model = torch.nn.Linear(4, 2)
    meter = Meter(model, warmup=0, window=1)

    def failing(batch: Any) -> Any:
        raise RuntimeError("CUDA out of memory")

    with meter:
        for step in range(2):
            if step == 1:  # the first step after the trials
                meter.count_again([torch.zeros(8, 4)], failing)
            with meter.step(torch.zeros(8, 4)):
                model(torch.zeros(8, 4)).sum().backward()
    report = meter.report()
    assert report.flops_per_step == 2 * (2 * 8 * 4 * 2)  # forward, weight gradient: counted
    assert "CUDA out of memory" in report.notes["float8_share"]
