"""The gradient all-reduce timer and the DDP wrapping options, in one process.

The timer is fed fake buckets here (what DDP passes a communication hook: index,
buffer, is_last); tests/distributed/test_torch_communication.py runs the real hook
under torchrun.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

import torch

from accelkit import plan_for
from accelkit.hardware import environment
from accelkit.torch.distributed import communication, wrapping
from accelkit.torch.tuning import levers

pytestmark = pytest.mark.torch

TORCHRUN = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}


class Bucket:
    def __init__(self, index: int, last: bool, numel: int = 1000) -> None:
        self._index, self._last, self._buffer = index, last, torch.zeros(numel)

    def index(self) -> int:
        return self._index

    def is_last(self) -> bool:
        return self._last

    def buffer(self) -> torch.Tensor:
        return self._buffer


def reduce(timer, clock, spans, step):
    """One backward pass whose buckets launch and complete at the given host times."""
    marks = []
    for i, (ready, _) in enumerate(spans):
        clock[0] = ready
        marks.append(timer.launch(Bucket(i, i == len(spans) - 1), sent_bytes=4000))
    for mark, (_, done) in zip(marks, spans, strict=True):
        clock[0] = done
        mark()


@pytest.fixture
def timer(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(communication, "_now", lambda: clock[0])
    timer = communication.GradientTimer(torch.device("cpu"))
    step = [0]
    timer.step_of = lambda: step[0]
    return timer, clock, step


def test_the_exposed_wait_runs_from_the_last_launch_to_the_last_completion(timer) -> None:
    timer, clock, step = timer
    # warm-up step 0, then steps 1 and 2: three buckets, overlapping then exposed
    for step[0], spans in enumerate(
        [
            [(0.0, 9.0), (1.0, 9.5), (2.0, 10.0)],
            [(10.0, 10.3), (10.2, 10.6), (10.5, 11.0)],  # 0.5 s exposed, 1.0 s in flight
            [(20.0, 20.4), (20.6, 20.8), (21.0, 21.2)],  # 0.2 s exposed, 0.8 s in flight
        ]
    ):
        reduce(timer, clock, spans, step)
    totals = timer.totals(warmup_steps=1)
    assert totals["reductions"] == 2 and totals["buckets"] == 3
    assert totals["exposed_s"] == pytest.approx(0.5 + 0.2)
    assert totals["in_flight_s"] == pytest.approx(1.0 + 0.8)
    assert totals["gradient_bytes"] == 3 * 4000 and totals["sent_bytes"] == 3 * 4000
    assert "host clock" in totals["method"]


def test_a_bucket_that_completes_before_the_last_launch_hides_nothing(timer) -> None:
    timer, clock, step = timer
    reduce(timer, clock, [(0.0, 0.5), (1.0, 1.0)], step)
    assert timer.totals(0)["exposed_s"] == 0.0


def test_a_timing_failure_stops_the_timing_with_a_reason_never_the_run(timer) -> None:
    timer, _, _ = timer

    class Broken(Bucket):
        def buffer(self):
            raise RuntimeError("no buffer")

    assert timer.launch(Broken(0, True), sent_bytes=0) is None
    assert timer.totals(0) is None
    assert "the timing failed (RuntimeError: no buffer)" in timer.why_missing(0)
    assert timer.launch(Bucket(0, True), sent_bytes=0) is None  # stays off


def test_without_steady_reductions_the_reason_is_said(timer) -> None:
    timer, clock, step = timer
    assert "no gradient all-reduce was timed" in timer.why_missing(0)
    reduce(timer, clock, [(0.0, 1.0)], step)
    assert timer.totals(warmup_steps=5) is None
    assert "run more steps" in timer.why_missing(5)
    notes: dict[str, str] = {}
    assert communication.steady_totals(timer, 5, notes) is None
    assert "run more steps" in notes["communication_share"]
    assert communication.steady_totals(None, 5, notes := {}) is None and notes == {}


@pytest.mark.parametrize(
    ("spans", "length"),
    [
        ([], 0.0),
        ([(0, 1)], 1.0),
        ([(0, 2), (1, 3)], 3.0),
        ([(0, 1), (2, 3)], 2.0),
        ([(0, 4), (1, 2)], 4.0),
    ],
)
def test_in_flight_time_is_the_union_of_the_intervals(spans, length) -> None:
    assert communication._union(spans) == pytest.approx(length)


def test_comm_timing_is_on_unless_switched_off() -> None:
    assert environment.comm_timing({}) is True
    assert environment.comm_timing({"ACCELKIT_COMM_TIMING": "1"}) is True
    for off in ("0", "false", "off", " No "):
        assert environment.comm_timing({"ACCELKIT_COMM_TIMING": off}) is False


def test_ddp_options_are_checked_naming_the_valid_ones() -> None:
    assert wrapping.check_options(None) == {}
    assert wrapping.check_options({"bucket_cap_mb": 50, "compression": "bf16"}) == {
        "bucket_cap_mb": 50,
        "compression": "bf16",
    }
    with pytest.raises(ValueError, match=r"'bucket_size' is not an option; use .*bucket_cap_mb"):
        wrapping.check_options({"bucket_size": 50})
    with pytest.raises(ValueError, match="'device_ids' is not an option"):
        wrapping.check_options({"device_ids": [0]})  # accelkit sets the devices
    with pytest.raises(ValueError, match=r"'fp8'\} is not valid; use one of 'none', 'bf16'"):
        wrapping.check_options({"compression": "fp8"})
    with pytest.raises(TypeError, match="dict of DistributedDataParallel options"):
        wrapping.check_options(["bucket_cap_mb"])


def test_a_torchrun_plan_wraps_with_bucket_views_and_the_script_wins() -> None:
    plan = plan_for("H200 SXM", 2, environ=TORCHRUN)
    setting = plan.get("ddp.gradient_as_bucket_view")
    assert setting.value is True and "no copy of every gradient" in setting.reason
    assert wrapping.Wrapping(plan, {}).options == {"gradient_as_bucket_view": True}
    kept = wrapping.Wrapping(plan, {"gradient_as_bucket_view": False, "compression": "bf16"})
    assert kept.options == {"gradient_as_bucket_view": False}
    assert kept.compression == "bf16" and kept.fixed == {"gradient_as_bucket_view", "compression"}
    one_gpu = plan_for("H200 SXM", 1)  # no launcher: no DDP, no setting
    assert one_gpu.get("ddp.gradient_as_bucket_view") is None
    assert wrapping.Wrapping(one_gpu, {}).options == {}


def test_trial_names_and_settings_name_the_levers_that_are_on() -> None:
    ddp = {"gradient_as_bucket_view": True, "bucket_cap_mb": 100, "static_graph": False}
    assert levers.label({**ddp, "compression": "bf16"}) == "+bf16-grads+buckets-100MB"
    assert levers.trial_settings({**ddp, "compression": "none"}) == {
        "compression": "none",
        "bucket_cap_mb": 100,
        "static_graph": False,
    }


def test_after_the_first_passes_one_in_twenty_is_timed(timer) -> None:
    timer, clock, step = timer
    for step[0] in range(60):  # every pass waits 0.5 s; untimed ones give no marks
        marks = [timer.launch(Bucket(i, i == 1), sent_bytes=4000) for i in range(2)]
        timed = step[0] < communication.FIRST_PASSES or (step[0] + 1) % 20 == 0
        assert all((mark is not None) == timed for mark in marks)
        clock[0] += 0.5
        for mark in marks:
            if mark is not None:
                mark()
    totals = timer.totals(warmup_steps=0)
    assert totals["reductions"] == communication.FIRST_PASSES + 3  # passes 8+: 20, 40, 60
    assert totals["exposed_s"] == pytest.approx(0.5 * totals["reductions"])
