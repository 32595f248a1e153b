"""The bounded series of the clock and the NVML sampler: at most 512 points however
long the run, neighbours averaged, the first and last rows kept as they came."""

from __future__ import annotations

import itertools
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelkit.profiling.clock import SERIES_POINTS, BoundedSeries, StepClock
from accelkit.profiling.sampler import NvmlSampler

from .test_clock_and_sampler import FakeNvml


@given(st.integers(1, 3000), st.sampled_from([5, 6, 16, 512]))
def test_bounded_keeps_the_ends_and_the_limit(count, limit):
    series = BoundedSeries(("i", "one"), limit=limit)
    for i in range(count):
        series.add((float(i), 1.0))
    columns = series.columns()
    assert len(columns["i"]) == min(count, len(columns["i"])) <= limit
    assert columns["i"][0] == 0.0 and columns["i"][-1] == count - 1
    assert columns["i"] == sorted(columns["i"])
    assert all(v == 1.0 for v in columns["one"])
    if count < (limit - 3) // 2 * 2 + 2:  # nothing merged yet
        assert columns["i"] == [float(i) for i in range(count)]


def test_bounded_averages_neighbours_and_keeps_the_peak_of_a_peak_column():
    series = BoundedSeries(("t", "memory", "gap"), limit=8, peak=("memory",))
    for i in range(1000):
        series.add((float(i), 5.0 if i == 501 else 1.0, None))
    columns = series.columns()
    assert len(columns["t"]) <= 8
    assert max(columns["memory"]) == 5.0
    assert columns["gap"] == [None] * len(columns["t"])
    # the middle points cover equal groups of rows: their means are evenly spaced
    middle = columns["t"][1:-2]
    steps = {b - a for a, b in itertools.pairwise(middle)}
    assert len(steps) == 1


def test_bounded_rejects_a_limit_without_room_for_the_middle():
    with pytest.raises(ValueError, match="limit=4"):
        BoundedSeries(("t",), limit=4)


def test_clock_series_stays_bounded_over_a_long_run_and_matches_the_windows():
    clock = StepClock(sync=None, warmup=2, window=1)
    for _ in range(4000):
        clock.fetched(0.001)
        clock.step_done(samples=8)
    summary = clock.finish()
    series = summary.series
    assert set(series) == {"time_s", "step", "step_time_s", "samples_per_second", "input_wait_s"}
    assert 2 < len(series["step"]) <= SERIES_POINTS
    assert series["step"][0] == 3.0 and series["step"][-1] == 4000.0
    assert series["step_time_s"][0] == summary.window_step_s[0]
    assert series["step_time_s"][-1] == summary.window_step_s[-1]
    assert all(w == pytest.approx(0.001) for w in series["input_wait_s"])
    assert series["time_s"] == sorted(series["time_s"])


def test_clock_without_steady_windows_has_no_series():
    clock = StepClock(sync=None, warmup=3, window=10)
    clock.step_done(samples=1)
    assert clock.finish().series == {}


def test_sampler_series_is_bounded_and_averages_the_devices():
    with NvmlSampler([0, 1], interval=0.001, nvml=FakeNvml()) as sampler:
        sampler.series.limit = 8  # a long run in a short test
        time.sleep(0.1)
    summary = sampler.summary()
    series = summary.series
    assert set(series) == {
        "time",
        "gpu_utilization",
        "gpu_memory_used_bytes",
        "power_w",
        "sm_clock_mhz",
    }
    assert 2 <= len(series["time"]) <= 8 < summary.samples / 2
    assert series["gpu_utilization"] == pytest.approx([90.5] * len(series["time"]))
    assert series["gpu_memory_used_bytes"] == [2e9] * len(series["time"])
    assert sampler.summary(start=series["time"][-1] + 1).series == {}
