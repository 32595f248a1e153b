"""One run, every door: the same model and data trained through each of accelkit's
doors gives the same figures (FLOPs per step exactly, step time and throughput within
what the trainers' own loops add), with evaluation on in each: the one measurement
core behind them (`accelkit.profiling.recorder`) counts only training steps.

PyTorch: `accelkit.torch.fit`, `Meter` in a hand-written loop, the Lightning callback
and the Hugging Face callback on one tiny GPT-2. Keras: `accelkit.keras.fit` and
`ProfileCallback` on one Keras model (a Keras model and a PyTorch one are not the
same run, so the two frameworks are compared within themselves).
"""

from __future__ import annotations

import tempfile

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytestmark = pytest.mark.torch

import accelkit

from ..helpers.torch_data import CPU_PLAN
from ..helpers.transformers_models import gpt2

STEPS, BATCH, LENGTH = 24, 8, 32
OPTIONS = {"plan": CPU_PLAN, "warmup": 4, "window": 5, "sample_gpu": False}


def _batches(count: int, seed: int) -> list[dict]:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 1000, (count * BATCH, LENGTH), generator=generator)
    return [
        {"input_ids": ids[i : i + BATCH], "labels": ids[i : i + BATCH]}
        for i in range(0, len(ids), BATCH)
    ]


TRAIN, EVAL = _batches(STEPS, 0), _batches(6, 1)


def _fit():
    model = gpt2(context=LENGTH)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    return accelkit.torch.fit(
        model, TRAIN, optimizer, None, eval_loader=EVAL, progress=False, tune=False, **OPTIONS
    )


def _meter():
    model = gpt2(context=LENGTH)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    meter = accelkit.torch.Meter(model, optimizer=optimizer, **OPTIONS)
    with meter:
        for index, batch in enumerate(TRAIN):
            with meter.step(batch):
                model(**batch).loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            if index == STEPS // 2:
                with meter.phase("evaluation"), torch.no_grad():
                    for held_out in EVAL:
                        model(**held_out)
    return meter.report()


def _lightning():
    lightning = pytest.importorskip("lightning.pytorch")
    import accelkit.lightning

    class Module(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = gpt2(context=LENGTH)

        def training_step(self, batch, index):
            return self.net(**batch).loss

        def validation_step(self, batch, index):
            return self.net(**batch).loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-4)

    callback = accelkit.lightning.AccelkitCallback(**OPTIONS)
    trainer = lightning.Trainer(
        callbacks=[callback],
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        val_check_interval=STEPS // 2,
        num_sanity_val_steps=0,
    )
    identity = lambda batch: batch[0]  # noqa: E731 - the batches are built already
    loader = torch.utils.data.DataLoader(TRAIN, batch_size=1, collate_fn=identity)
    held_out = torch.utils.data.DataLoader(EVAL, batch_size=1, collate_fn=identity)
    trainer.fit(Module(), loader, held_out)
    return callback.report


def _hf():
    pytest.importorskip("accelerate", reason="the Trainer needs accelerate")
    import transformers

    import accelkit.hf

    samples = [{k: v[i] for k, v in batch.items()} for batch in TRAIN for i in range(BATCH)]
    held_out = [{k: v[i] for k, v in batch.items()} for batch in EVAL for i in range(BATCH)]
    args = transformers.TrainingArguments(
        output_dir=tempfile.mkdtemp(),
        max_steps=STEPS,
        per_device_train_batch_size=BATCH,
        per_device_eval_batch_size=BATCH,
        eval_strategy="steps",
        eval_steps=STEPS // 2,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        learning_rate=1e-4,
    )
    callback = accelkit.hf.AccelkitCallback(**OPTIONS)
    transformers.Trainer(
        gpt2(context=LENGTH),
        args,
        train_dataset=samples,
        eval_dataset=held_out,
        callbacks=[callback],
    ).train()
    return callback.report


@pytest.fixture
def one_thread():
    """One intra-op thread: the doors' step times compare runs made one after another,
    and two threads on a shared 2-core machine swing them by several times."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_every_torch_door_gives_the_same_figures_for_the_same_run(one_thread) -> None:
    reports = {
        name: run()
        for name, run in [("fit", _fit), ("meter", _meter), ("lightning", _lightning), ("hf", _hf)]
    }
    reference = reports["fit"]
    for name, report in reports.items():
        assert report.steps == STEPS, name
        assert report.batch_size == BATCH, name
        assert report.flops_per_step == pytest.approx(reference.flops_per_step, rel=0.01), name
        assert report.achieved_tflops == pytest.approx(
            report.flops_per_step / report.step_time_s / 1e12
        ), name
        # the trainers' own loops add their overhead, never the evaluation's time
        ratio = report.step_time_s / reference.step_time_s
        assert 0.4 < ratio < 2.5, f"{name}: step time x{ratio:.2f} the fit's"
        assert report.evaluation_seconds > 0, name
        assert report.mfu is None and report.notes.get("mfu"), name  # a CPU: no peak
        assert not any(item["id"] == "input_bound" for item in report.advice), name


def test_both_keras_doors_give_the_same_figures() -> None:
    keras = pytest.importorskip("keras")
    import numpy as np

    import accelkit.keras

    def model():
        keras.utils.set_random_seed(0)
        made = keras.Sequential(
            [keras.Input((64,)), keras.layers.Dense(256, activation="relu"), keras.layers.Dense(8)]
        )
        made.compile(
            optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        )
        return made

    rng = np.random.default_rng(0)
    x, y = rng.random((1024, 64)).astype("float32"), rng.integers(0, 8, 1024)
    held_out = (x[:512], y[:512])
    common = {"batch_size": 32, "epochs": 2, "verbose": 0, "validation_data": held_out}
    fitted = accelkit.keras.fit(model(), x, y, **common, **OPTIONS)
    callback = accelkit.keras.ProfileCallback(**OPTIONS)
    model().fit(x, y, callbacks=[callback], **common)
    called = callback.report
    assert fitted.steps == called.steps == 64
    assert fitted.flops_per_step == called.flops_per_step
    assert 0.5 < called.step_time_s / fitted.step_time_s < 2.0
    assert fitted.evaluation_seconds > 0 and called.evaluation_seconds > 0
