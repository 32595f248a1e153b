"""ProfileCallback's figures in Keras' logs: History, CSVLogger (real fits on the CPU)."""

from __future__ import annotations

import csv

import pytest

import accelkit
from accelkit.hardware.info import HardwareInfo
from accelkit.keras.epoch_logs import (
    INPUT_WAIT_SHARE,
    MFU,
    SAMPLES_PER_SECOND,
    TOKENS_PER_SECOND,
    EpochClock,
)
from accelkit.planning import Request, plan

from ..helpers import keras_models
from ..helpers.keras_models import classification_data

pytestmark = pytest.mark.tensorflow
keras = pytest.importorskip("keras")
pytest.importorskip("tensorflow")

CPU_PLAN = plan(HardwareInfo(source="snapshot"), Request(framework="tensorflow"))


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


def test_an_epoch_where_no_window_ended_adds_nothing() -> None:
    x, y = classification_data(128)  # 4 steps an epoch, a window of 50
    history = keras_models.mlp().fit(
        x,
        y,
        batch_size=32,
        epochs=2,
        verbose=0,
        callbacks=[accelkit.keras.ProfileCallback(CPU_PLAN)],
    )
    assert not any(key.startswith("accelkit_") for key in history.history)


def test_mfu_from_the_flops_and_the_peak() -> None:
    clock = EpochClock(None, warmup=2, window=4)
    for _ in range(10):  # 2 warm-up steps, two windows of 4
        clock.fetched(0.0)
        clock.step_done(samples=16, tokens=0)
    logs = clock.epoch_logs(flops_per_step=1e9, peak_tflops=100.0)
    assert set(logs) == {SAMPLES_PER_SECOND, MFU, INPUT_WAIT_SHARE}
    assert logs[MFU] == pytest.approx(1e9 * 8 * logs[SAMPLES_PER_SECOND] / (16 * 8) / 1e14)
    assert clock.epoch_logs(1e9, 100.0) == {}  # the next epoch has no window yet
