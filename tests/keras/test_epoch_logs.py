"""ProfileCallback's figures in Keras' logs at every epoch's end: History, CSVLogger (real
fits on the CPU)."""

from __future__ import annotations

import csv

import pytest

import accelkit
from accelkit.hardware.info import HardwareInfo
from accelkit.planning import Request, plan
from accelkit.profiling import mfu
from accelkit.profiling.metrics import spell

from ..helpers import keras_models
from ..helpers.keras_models import classification_data

pytestmark = pytest.mark.tensorflow
keras = pytest.importorskip("keras")
pytest.importorskip("tensorflow")

CPU_PLAN = plan(HardwareInfo(source="snapshot"), Request(framework="tensorflow"))
SAMPLES_PER_SECOND = spell("samples_per_second", "keras")
TOKENS_PER_SECOND = spell("tokens_per_second", "keras")
STEP_TIME = spell("step_time_s", "keras")
MFU = spell("mfu", "keras")
ACHIEVED = spell("achieved_tflops", "keras")
INPUT_WAIT_SHARE = spell("input_wait_share", "keras")


@pytest.fixture(autouse=True)
def float32_policy():
    with keras_models.global_policy_kept():
        yield


def rows(path) -> list[dict[str, str]]:
    with open(path, newline="") as file:
        return list(csv.DictReader(file))


def test_history_and_csv_logger_record_each_epochs_figures(tmp_path) -> None:
    x, y = classification_data(640)  # 20 steps of 32 an epoch: two windows of 10
    callback = accelkit.keras.ProfileCallback(CPU_PLAN, warmup=0, window=10, tokens_per_sample=8)
    logger = keras.callbacks.CSVLogger(str(tmp_path / "log.csv"))
    history = keras_models.mlp().fit(
        x, y, batch_size=32, epochs=3, verbose=0, callbacks=[callback, logger]
    )
    for key in (SAMPLES_PER_SECOND, TOKENS_PER_SECOND, INPUT_WAIT_SHARE):
        assert len(history.history[key]) == 3 and all(
            v > 0 or key == INPUT_WAIT_SHARE for v in history.history[key]
        )
    assert MFU not in history.history  # a CPU has no datasheet peak: left out, not None
    rates = history.history[SAMPLES_PER_SECOND]
    assert history.history[TOKENS_PER_SECOND] == pytest.approx([8 * r for r in rates])
    # The windows cover the whole steady run: the report's rate lies between the epochs'.
    report = callback.report
    assert min(rates) * 0.999 <= report.samples_per_second <= max(rates) * 1.001
    written = rows(tmp_path / "log.csv")
    assert len(written) == 3
    assert [float(r[SAMPLES_PER_SECOND]) for r in written] == pytest.approx(rates)
    assert all(0 <= float(r[INPUT_WAIT_SHARE]) <= 1 for r in written)


def test_accelkit_fit_puts_its_callback_before_the_users_csv_logger(tmp_path) -> None:
    x, y = classification_data(640)
    path = tmp_path / "log.csv"
    report = accelkit.keras.fit(
        keras_models.mlp(),
        x,
        y,
        batch_size=32,
        epochs=2,
        verbose=0,
        plan=CPU_PLAN,
        warmup=0,
        window=10,
        callbacks=[keras.callbacks.CSVLogger(str(path))],
    )
    assert SAMPLES_PER_SECOND in rows(path)[0]
    assert len(report.history[SAMPLES_PER_SECOND]) == 2


def test_steps_per_execution_counts_every_batch_of_the_epoch() -> None:
    x, y = classification_data(640)
    model = keras_models.mlp()
    model.compile(
        optimizer="adam",
        steps_per_execution=5,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    callback = accelkit.keras.ProfileCallback(CPU_PLAN, warmup=0, window=10)
    history = model.fit(x, y, batch_size=32, epochs=3, verbose=0, callbacks=[callback])
    rates = history.history[SAMPLES_PER_SECOND]
    assert len(rates) == 3
    assert callback.report.steps == 60
    assert min(rates) * 0.999 <= callback.report.samples_per_second <= max(rates) * 1.001
    # Keras fetches those batches inside its compiled loop: no input wait to give.
    assert INPUT_WAIT_SHARE not in history.history


def test_every_epoch_has_its_figures_when_epochs_are_shorter_than_the_window(tmp_path) -> None:
    x, y = classification_data(320)  # 10 steps an epoch, the default window of 50
    logger = keras.callbacks.CSVLogger(str(tmp_path / "log.csv"))
    callback = accelkit.keras.ProfileCallback(CPU_PLAN)
    history = keras_models.mlp().fit(
        x, y, batch_size=32, epochs=3, verbose=0, callbacks=[callback, logger]
    )
    for key in (SAMPLES_PER_SECOND, STEP_TIME, INPUT_WAIT_SHARE):
        assert len(history.history[key]) == 3, key
    assert [float(r[SAMPLES_PER_SECOND]) for r in rows(tmp_path / "log.csv")] == pytest.approx(
        history.history[SAMPLES_PER_SECOND]
    )
    # The epochs' figures are the run's, cut at the epochs' ends (the first after warm-up).
    steps = [7, 10, 10]
    seconds = sum(n * s for n, s in zip(steps, history.history[STEP_TIME], strict=True))
    assert callback.report.steady_seconds == pytest.approx(seconds, rel=1e-6)


def test_mfu_of_each_epoch_is_the_reports_arithmetic(monkeypatch) -> None:
    # A CPU has no datasheet peak: give one, for the epochs' MFU and the report's.
    monkeypatch.setattr(mfu, "peak", lambda *a, **k: mfu.Peak(0.5, "fp32", "a test peak"))
    x, y = classification_data(640)
    callback = accelkit.keras.ProfileCallback(CPU_PLAN, warmup=2, window=4, sample_gpu=False)
    history = keras_models.mlp().fit(x, y, batch_size=32, epochs=2, verbose=0, callbacks=[callback])
    report, logs = callback.report, history.history
    assert logs[MFU] == pytest.approx([a / 0.5 for a in logs[ACHIEVED]])
    assert logs[ACHIEVED] == pytest.approx(
        [report.flops_per_step / s / 1e12 for s in logs[STEP_TIME]]
    )
    assert min(logs[MFU]) * 0.999 <= report.mfu <= max(logs[MFU]) * 1.001


def test_tensorboard_series_hold_each_epochs_window_the_last_included(tmp_path) -> None:
    pytest.importorskip("tensorboard", reason="Keras' TensorBoard callback needs it")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util.tensor_util import make_ndarray

    x, y = classification_data(320)  # 10 steps an epoch, the last epoch's window closed too
    callback = accelkit.keras.ProfileCallback(CPU_PLAN, warmup=1, window=4, sample_gpu=False)
    board = keras.callbacks.TensorBoard(str(tmp_path))
    history = keras_models.mlp().fit(
        x, y, batch_size=32, epochs=3, verbose=0, callbacks=[callback, board]
    )
    (events,) = (tmp_path / "train").glob("events.out.tfevents*")
    accumulator = EventAccumulator(str(events), size_guidance={"tensors": 0})
    accumulator.Reload()
    tags = accumulator.Tags()["tensors"]
    points = [
        (e.step, float(make_ndarray(e.tensor_proto)))
        for e in accumulator.Tensors(f"epoch_{STEP_TIME}")
    ]
    assert [step for step, _ in points] == [0, 1, 2]
    assert [value for _, value in points] == pytest.approx(history.history[STEP_TIME], rel=1e-6)
    # The epochs' windows are the whole steady run, the last epoch's included.
    seconds = sum(n * value for n, (_, value) in zip([9, 10, 10], points, strict=True))
    assert seconds == pytest.approx(callback.report.steady_seconds, rel=1e-5)
    assert not any("run" in tag for tag in tags), tags  # the run's figures: the report's
