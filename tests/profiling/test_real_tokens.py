"""Real (unpadded) tokens next to every token position: counted by the clock without a
per-step read of the device, turned into `real_tokens_per_second`, saved and shown."""

from __future__ import annotations

import json

import pytest

from accelkit.hardware.info import HardwareInfo
from accelkit.planning import Request, plan
from accelkit.profiling.assemble import Measurements, report_from
from accelkit.profiling.clock import StepClock
from accelkit.profiling.run_report import RunReport
from accelkit.report.render import render_run


class DeviceCount:
    """Stands in for a 0-d tensor on a GPU: adding stays lazy, reading (`int`) is what
    would wait for the device, and is counted."""

    reads = 0

    def __init__(self, value: int) -> None:
        self.value = value

    def __add__(self, other: object) -> DeviceCount:
        other_value = other.value if isinstance(other, DeviceCount) else other
        return DeviceCount(self.value + other_value)

    __radd__ = __add__

    def __int__(self) -> int:
        DeviceCount.reads += 1
        return self.value


def run(real: list[object], warmup: int = 2, window: int = 3) -> StepClock:
    clock = StepClock(warmup=warmup, window=window)
    for count in real:
        clock.step_begin()
        clock.step_done(samples=4, tokens=4 * 32, real_tokens=count)
    return clock


def test_real_tokens_are_added_on_the_device_and_read_once_at_the_end():
    DeviceCount.reads = 0
    counts = [DeviceCount(n) for n in (128, 100, 90, 80, 70, 60, 50, 40)]
    clock = run(counts)
    assert DeviceCount.reads == 0  # nothing was read during the steps, boundaries included

    summary = clock.finish()

    assert DeviceCount.reads == 1
    assert summary.steady_real_tokens == 90 + 80 + 70 + 60 + 50 + 40  # warm-up left out
    assert summary.steady_tokens == 6 * 128


def test_a_steady_step_without_a_real_count_leaves_the_figure_unknown():
    assert run([10, 10, 10, None, 10]).finish().steady_real_tokens is None
    assert run([None, None, 10, 10]).finish().steady_real_tokens == 20  # warm-up only
    assert run([None] * 5).finish().steady_real_tokens is None


def test_steps_without_tokens_need_no_real_count():
    clock = StepClock(warmup=0)
    clock.step_done(samples=4, tokens=64, real_tokens=40)
    clock.step_done(samples=4)  # e.g. meter.step() with no batch
    assert clock.finish().steady_real_tokens == 40


def _report(clock: StepClock) -> RunReport:
    hardware = HardwareInfo(source="snapshot")
    return report_from(
        Measurements(
            framework="torch",
            model="m",
            device="cpu",
            plan=plan(hardware, Request()),
            hardware=hardware,
            clock=clock.finish(),
        )
    )


def test_the_report_gives_padded_and_real_tokens_per_second_and_shows_both():
    report = _report(run([128, 128, 100, 64, 32]))

    assert report.tokens_per_second == pytest.approx(3 * 128 / report.steady_seconds)
    assert report.real_tokens_per_second == pytest.approx(196 / report.steady_seconds)
    assert "real_tokens_per_second" not in report.notes
    text = render_run(report)
    assert f"{report.real_tokens_per_second:,.0f} real, without padding" in text
    data = json.loads(json.dumps(report.to_dict()))
    assert data["real_tokens_per_second"] == report.real_tokens_per_second
    assert RunReport.from_dict(data) == report


def test_without_a_mask_the_real_figure_is_none_with_the_reason():
    report = _report(run([None] * 5))

    assert report.tokens_per_second and report.real_tokens_per_second is None
    assert "no attention_mask" in report.notes["real_tokens_per_second"]
    assert "real, without padding" not in render_run(report)


def test_a_report_saved_before_the_field_existed_loads_without_it(tmp_path):
    data = _report(run([None] * 5)).to_dict()
    del data["real_tokens_per_second"]
    (tmp_path / "old.json").write_text(json.dumps(data))

    assert RunReport.load(tmp_path / "old.json").real_tokens_per_second is None
