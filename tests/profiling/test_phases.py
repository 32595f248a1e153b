"""The clock's phases: evaluation and the rest count in no training figure."""

from __future__ import annotations

import time

import pytest

from accelkit.profiling.clock import EVALUATION, OTHER, StepClock
from accelkit.profiling.metrics import window_figures
from accelkit.profiling.options import MeterOptions
from accelkit.profiling.sampler import NvmlSampler, Sample

STEP_S = 0.004


def _train(clock: StepClock, steps: int, *, gap_s: float = 0.0) -> None:
    for _ in range(steps):
        clock.step_begin()
        time.sleep(STEP_S)
        clock.step_done(samples=8)
        time.sleep(gap_s)


def test_paused_time_is_no_step_time_and_no_input_wait() -> None:
    clock = StepClock(None, warmup=2, window=5)
    _train(clock, 10)
    clock.pause(EVALUATION)
    time.sleep(0.2)  # 10x the training time so far
    clock.resume()
    _train(clock, 10)
    summary = clock.finish()
    assert summary.phase_s[EVALUATION] == pytest.approx(0.2, abs=0.05)
    assert summary.step_s < 2.5 * STEP_S
    assert summary.input_wait_share < 0.3
    assert summary.total_s >= summary.phase_s[EVALUATION] + summary.steady_s


def test_attribute_moves_the_gap_after_the_fact() -> None:
    clock = StepClock(None, warmup=0, window=4)
    _train(clock, 4)
    time.sleep(0.1)  # a trainer evaluated; it says so only now
    clock.attribute(EVALUATION)
    time.sleep(0.05)  # then saved a checkpoint
    clock.attribute(OTHER)
    _train(clock, 4)
    summary = clock.finish()
    assert summary.phase_s[EVALUATION] == pytest.approx(0.1, abs=0.04)
    assert summary.phase_s[OTHER] == pytest.approx(0.05, abs=0.04)
    assert summary.input_wait_s < 0.02
    assert summary.step_s < 2.5 * STEP_S


def test_the_gap_after_a_break_is_the_rest_not_input_wait() -> None:
    clock = StepClock(None, warmup=0, window=3)
    _train(clock, 3)
    with_break = clock.pause, clock.resume
    with_break[0](EVALUATION)
    with_break[1]()
    time.sleep(0.08)  # a new epoch's iterator starts its workers
    _train(clock, 3)
    summary = clock.finish()
    assert summary.phase_s[OTHER] >= 0.07
    assert summary.input_wait_s < 0.02


def test_gaps_between_steps_stay_input_wait() -> None:
    clock = StepClock(None, warmup=0, window=5)
    _train(clock, 10, gap_s=STEP_S)
    summary = clock.finish()
    assert 0.3 < summary.input_wait_share < 0.7
    assert not summary.phase_s


def test_take_gives_the_windows_since_the_last_take() -> None:
    clock = StepClock(None, warmup=0, window=100)
    _train(clock, 5)
    assert clock.take().steps == 0  # no window ended yet
    sums = clock.take(close=True)
    assert (sums.steps, sums.samples) == (5, 40)
    figures = window_figures(sums, flops_per_step=1e9, peak_tflops=None)
    assert figures["samples_per_second"] == pytest.approx(40 / sums.seconds)
    assert "mfu" not in figures


def test_bad_phase_names_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="evaluation, other"):
        StepClock(None).pause("validation")


class _FakeNvml:
    NVML_CLOCK_SM = 1

    def __init__(self) -> None:
        self.busy = 100.0

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> object:
        return type("U", (), {"gpu": self.busy})()

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> object:
        return type("M", (), {"used": 1})()

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return 100_000

    def nvmlDeviceGetClockInfo(self, handle: int, kind: int) -> int:
        return 1000


def test_sampler_leaves_a_break_out_of_the_training_figures() -> None:
    nvml = _FakeNvml()
    sampler = NvmlSampler([0], interval=0.01, nvml=nvml)
    start = time.perf_counter()
    with sampler:
        sampler.keep_totals_from(start)
        time.sleep(0.15)
        nvml.busy, began = 0.0, time.perf_counter()  # evaluation: the GPU idles
        time.sleep(0.15)
        sampler.exclude(began, time.perf_counter())
        nvml.busy = 100.0
        time.sleep(0.05)
    assert sampler.summary(start, None).gpu_utilization == pytest.approx(100.0)
    assert isinstance(sampler.samples[0], Sample)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"window": 0}, "window=0"),
        ({"warmup": -1}, "warmup=-1"),
        ({"flops_per_step": 0}, "flops_per_step=0"),
        ({"tokens_per_sample": 1.5}, "tokens_per_sample=1.5"),
        ({"single_device": -3}, "single_device"),
    ],
)
def test_options_are_checked_once_naming_the_option(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MeterOptions(**options)


def test_unknown_option_names_the_valid_ones() -> None:
    with pytest.raises(TypeError, match="valid ones are plan, flops_per_step"):
        MeterOptions.of({"windw": 3})


def test_the_wait_for_queued_device_work_at_a_pause_stays_training() -> None:
    queued = [0.08]  # the last steps' device work, still running when evaluation begins

    def sync() -> None:
        time.sleep(queued.pop() if queued else 0.0)

    clock = StepClock(sync, warmup=0, window=100)
    _train(clock, 4)
    clock.pause(EVALUATION)
    clock.resume()
    summary = clock.finish()
    assert summary.steady_s >= 0.08 + 4 * STEP_S
    assert summary.phase_s.get(OTHER, 0.0) < 0.02


def test_closing_a_window_then_pausing_counts_the_gap_once() -> None:
    clock = StepClock(None, warmup=0, window=100)
    _train(clock, 4)
    time.sleep(0.05)  # an epoch's end: the window closes here, then evaluation begins
    clock.take(close=True)
    clock.pause(EVALUATION)
    clock.resume()
    summary = clock.finish()
    assert summary.steady_s + sum(summary.phase_s.values()) == pytest.approx(
        summary.total_s, abs=1e-3
    )


def test_mid_epoch_break_leaves_the_next_wait_input() -> None:
    clock = StepClock(None, warmup=0, window=100)
    _train(clock, 3)
    time.sleep(0.03)  # a trainer logged mid-epoch
    clock.attribute(OTHER, mid_epoch=True)
    time.sleep(0.05)  # then waited for the next batch of the same epoch
    _train(clock, 3)
    summary = clock.finish()
    assert summary.input_wait_s >= 0.045
    assert summary.phase_s[OTHER] == pytest.approx(0.03, abs=0.02)
