"""The step clock and the NVML sampler, framework-free."""

from __future__ import annotations

import threading
import time
import types

import pytest

from accelkit.profiling import sampler as sampler_module
from accelkit.profiling.clock import StepClock
from accelkit.profiling.sampler import NvmlSampler


def test_clock_syncs_only_at_window_boundaries_and_excludes_warmup() -> None:
    syncs = []
    clock = StepClock(sync=lambda: syncs.append(clock.steps), warmup=2, window=5)
    for _ in range(12):
        clock.step_begin()
        time.sleep(0.002)
        clock.step_done(samples=8, tokens=80)
    summary = clock.finish()
    # end of warm-up (step 2), then every 5 steady steps (7, 12); finish adds none.
    assert syncs == [2, 7, 12]
    assert summary.steps == 12 and summary.warmup_steps == 2 and summary.steady_steps == 10
    assert summary.steady_samples == 80 and summary.steady_tokens == 800
    assert summary.steady_s == pytest.approx(sum(summary.window_step_s) * 5, rel=1e-6)
    assert summary.step_s >= 0.002
    assert len(summary.window_step_s) == 2


def test_clock_counts_the_gap_between_steps_as_input_wait() -> None:
    clock = StepClock(warmup=1, window=100)
    for _ in range(6):
        time.sleep(0.01)  # "waiting for the loader"
        clock.step_begin()
        clock.step_done(samples=1)
    summary = clock.finish()
    assert summary.input_wait_share > 0.8


def test_clock_with_only_warmup_steps_has_no_steady_state() -> None:
    clock = StepClock(warmup=3)
    clock.step_begin()
    clock.step_done(samples=4)
    summary = clock.finish()
    assert summary.steady_s is None and summary.step_s is None
    assert summary.input_wait_share is None


def test_clock_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="window"):
        StepClock(window=0)


class FakeNvml:
    """The five pynvml calls the sampler uses; optionally failing after some reads."""

    NVML_CLOCK_SM = 1

    def __init__(self, fail_after: int | None = None) -> None:
        self.reads = 0
        self.fail_after = fail_after
        self.shutdown = False

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        self.shutdown = True

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetUtilizationRates(self, handle):
        self.reads += 1
        if self.fail_after is not None and self.reads > self.fail_after:
            raise RuntimeError("GPU is lost")
        return types.SimpleNamespace(gpu=90 + handle)

    def nvmlDeviceGetMemoryInfo(self, handle):
        return types.SimpleNamespace(used=(handle + 1) * 10**9)

    def nvmlDeviceGetPowerUsage(self, handle):
        return 500_000

    def nvmlDeviceGetClockInfo(self, handle, kind):
        return 1980


def nvml_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "accelkit-nvml"]


def test_sampler_summarises_utilisation_memory_power_clock() -> None:
    nvml = FakeNvml()
    with NvmlSampler([0, 1], interval=0.005, nvml=nvml) as sampler:
        time.sleep(0.1)
    summary = sampler.summary()
    assert summary.samples >= 4
    assert summary.gpu_utilization == pytest.approx(90.5)
    assert summary.memory_used_bytes == 2 * 10**9
    assert summary.power_w == 500 and summary.sm_clock_mhz == 1980
    assert nvml.shutdown and not nvml_threads()


def test_long_runs_keep_totals_not_samples(monkeypatch) -> None:
    class Varying(FakeNvml):
        """Utilisation 0, 1, 2... per read, so the mean tells which reads were summed."""

        def nvmlDeviceGetUtilizationRates(self, handle):
            self.reads += 1
            return types.SimpleNamespace(gpu=self.reads - 1)

    monkeypatch.setattr(sampler_module, "RECENT_S", 0.02)
    nvml = Varying()
    start = time.perf_counter()
    with NvmlSampler([0], interval=0.001, nvml=nvml) as sampler:
        sampler.keep_totals_from(start)
        time.sleep(0.3)
    summary = sampler.summary(start)
    # every read summed, in constant memory: the raw samples cover the last 20 ms only
    assert summary.samples == nvml.reads > 40
    assert summary.gpu_utilization == pytest.approx((nvml.reads - 1) / 2)
    assert summary.memory_used_bytes == 10**9
    assert len(sampler.samples) < nvml.reads / 2
    assert sampler.samples[0].time >= sampler.samples[-1].time - 0.02
    # a window (another start) reads the recent raw samples
    recent = sampler.summary(sampler.samples[0].time)
    assert recent.samples == len(sampler.samples)


def test_sampler_stops_when_the_body_raises() -> None:
    with pytest.raises(KeyError), NvmlSampler([0], interval=0.005, nvml=FakeNvml()):
        raise KeyError("the user's error")
    assert not nvml_threads()


def test_an_nvml_error_stops_sampling_with_a_note_and_no_exception() -> None:
    with NvmlSampler([0], interval=0.001, nvml=FakeNvml(fail_after=3)) as sampler:
        time.sleep(0.05)
    assert len(sampler.samples) == 3
    assert "GPU is lost" in sampler.notes[0]


def test_sampler_without_nvml_notes_why() -> None:
    class Missing(FakeNvml):
        def nvmlInit(self):
            raise OSError("libnvidia-ml.so.1 not found")

    with NvmlSampler([0], nvml=Missing()) as sampler:
        pass
    assert not sampler.samples and "libnvidia-ml" in sampler.notes[0]
