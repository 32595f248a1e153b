"""The callback's figures reach every logger of the `Trainer` with the usual
``callbacks=[cb]``: the ``report_to`` loggers (TensorBoard here) and the callbacks
passed before it, although the Trainer calls them before it. Each ``accelkit/<figure>``
series holds windows to the end; the run's figures have names of their own."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate", reason="the Trainer needs accelerate")
pytestmark = pytest.mark.torch

from transformers.trainer_callback import DefaultFlowCallback

from accelkit.hf import AccelkitCallback

from ..helpers.torch_data import CPU_PLAN
from .runs import train, trainer

# A log's window figures on the CPU (no MFU: no datasheet peak; no GPU figures).
WINDOW = {
    "accelkit/step_time_s",
    "accelkit/samples_per_second",
    "accelkit/tokens_per_second",
    "accelkit/achieved_tflops",
    "accelkit/input_wait_share",
}


class _Logger(transformers.TrainerCallback):
    """A logger of one's own, passed before the callback: what each on_log received."""

    def __init__(self) -> None:
        self.logs: list[dict] = []

    def on_log(self, args, state, control, logs=None, **_):
        self.logs.append(dict(logs))


def _scalars(tmp_path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar the Trainer's TensorBoard logger wrote: (step, value) by tag."""
    pytest.importorskip("tensorboard", reason="the Trainer's TensorBoard logger needs it")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    scalars: dict[str, list[tuple[int, float]]] = {}
    for events in tmp_path.rglob("events.out.tfevents*"):
        accumulator = EventAccumulator(str(events))
        accumulator.Reload()
        for tag in accumulator.Tags()["scalars"]:
            scalars[tag] = [(e.step, e.value) for e in accumulator.Scalars(tag)]
    return scalars


def test_tensorboard_gets_the_figures_with_callbacks_cb(tmp_path) -> None:
    callback = AccelkitCallback(plan=CPU_PLAN, warmup=1)
    run = train(
        tmp_path,
        callback,
        report_to=["tensorboard"],  # writes under output_dir/runs/
        eval_strategy="steps",
        eval_steps=4,
        eval_rows=16,
    )
    tags = set(_scalars(tmp_path))
    ours = {tag for tag in tags if "accelkit/" in tag}
    assert {f"train/{name}" for name in WINDOW} <= ours, sorted(tags)
    assert {"train/accelkit/run/flops_per_step", "train/accelkit/run/evaluation_share"} <= ours
    assert not any(tag.startswith("eval/") for tag in ours)  # no figures on eval logs
    assert run.state.log_history[-1]["accelkit/run/evaluation_share"] > 0


def test_tensorboard_series_end_on_the_last_window_the_run_apart(tmp_path) -> None:
    callback = AccelkitCallback(plan=CPU_PLAN, warmup=1, sample_gpu=False)
    train(tmp_path, callback, report_to=["tensorboard"], max_steps=14)  # a log every 4
    scalars, report = _scalars(tmp_path), callback.report
    points = scalars["train/accelkit/step_time_s"]
    assert [step for step, _ in points] == [4, 8, 12, 14]  # the last: steps 13 and 14
    # The windows follow each other to the end: their seconds are the run's steady seconds.
    seconds, last = 0.0, 1  # step 1 is the warm-up
    for step, step_time in points:
        seconds, last = seconds + (step - last) * step_time, step
    assert seconds == pytest.approx(report.steady_seconds, rel=1e-5)
    # The run's figures: one point each, at the last step, under their own tags.
    run_step_time = scalars["train/accelkit/run/step_time_s"]
    assert run_step_time == [(14, pytest.approx(report.step_time_s, rel=1e-6))]
    assert scalars["train/accelkit/run/advice_count"] == [(14, len(report.advice))]
    assert scalars["train/accelkit/run/flops_per_step"][0][1] == pytest.approx(
        report.flops_per_step, rel=1e-6
    )
    for figure in ("flops_per_step", "advice", "advice_count", "evaluation_share"):
        assert f"train/accelkit/{figure}" not in scalars, figure


def test_callbacks_passed_before_it_get_the_figures(tmp_path) -> None:
    mine, callback = _Logger(), AccelkitCallback(plan=CPU_PLAN, warmup=1)
    run = train(tmp_path, callback, before=(mine,))
    training = [logs for logs in mine.logs if "loss" in logs]
    assert len(training) == 3
    for logs in training:
        assert logs.keys() >= WINDOW, logs
    (final,) = [logs for logs in mine.logs if "train_runtime" in logs]
    assert final.keys() >= {name.replace("accelkit/", "accelkit/run/") for name in WINDOW}
    # right after the flow callback, which sets the flags its on_step_end reads
    handler = run.callback_handler.callbacks
    assert isinstance(handler[0], DefaultFlowCallback) and handler[1] is callback
    assert handler.index(mine) > 1


def test_a_callback_inserted_first_runs_after_the_flow_and_measures_once(tmp_path) -> None:
    callback = AccelkitCallback(plan=CPU_PLAN, warmup=1)
    run = trainer(tmp_path, AccelkitCallback(plan=CPU_PLAN), report_to=[])
    run.callback_handler.remove_callback(AccelkitCallback)
    run.callback_handler.callbacks.insert(0, callback)  # what the old docs suggested
    with callback:
        run.train()
    assert isinstance(run.callback_handler.callbacks[0], DefaultFlowCallback)
    assert run.callback_handler.callbacks[1] is callback
    assert callback.report.steps == 12
    logged = [e for e in run.state.log_history if "accelkit/step_time_s" in e]
    assert [e["step"] for e in logged] == [4, 8, 12]
    assert "accelkit/run/step_time_s" in run.state.log_history[-1]
