"""The all-reduce figures of a report: per steady step from the timer's totals, per rank
after gathering, saved and checked on load, and a note where they were not measured."""

from __future__ import annotations

import json

import pytest

from accelkit.hardware.info import HardwareInfo
from accelkit.planning import Request, plan
from accelkit.profiling import world
from accelkit.profiling.assemble import Measurements, report_from
from accelkit.profiling.clock import ClockSummary
from accelkit.profiling.run_report import RunReport

HARDWARE = HardwareInfo(source="snapshot")
TOTALS = {
    "exposed_s": 0.5,
    "in_flight_s": 2.0,
    "reductions": 100,
    "buckets": 5,
    "gradient_bytes": 102_400_000,
    "sent_bytes": 51_200_000,
    "host_s": 0.002,
    "method": "DDP communication hook: ...",
}


def report(communication=TOTALS, steady_steps=100, steady_s=4.0) -> RunReport:
    clock = ClockSummary(
        steps=steady_steps + 5,
        warmup_steps=5,
        warmup_s=1.0,
        steady_steps=steady_steps,
        steady_s=steady_s,
        steady_samples=64 * steady_steps,
        steady_tokens=0,
        input_wait_s=0.0,
        total_s=steady_s + 1.0,
        window_step_s=[],
    )
    return report_from(
        Measurements(
            framework="torch",
            model="m",
            device="cpu",
            plan=plan(HARDWARE, Request()),
            hardware=HARDWARE,
            clock=clock,
            communication=communication,
        )
    )


def test_the_totals_become_figures_per_steady_step() -> None:
    r = report()
    assert r.communication_s == pytest.approx(0.005)  # 0.5 s over 100 steps
    assert r.communication_share == pytest.approx(0.125)  # of 4 s
    facts = r.facts["communication"]
    assert facts["in_flight_s"] == pytest.approx(0.02)
    assert facts["hook_host_us"] == pytest.approx(20.0)
    assert facts["all_reduces"] == 100 and facts["buckets"] == 5
    assert r.ranks[0]["communication_s"] == r.communication_s
    assert r.ranks[0]["all_reduce_in_flight_s"] == pytest.approx(0.02)


def test_a_report_with_the_figures_saves_and_loads_equal() -> None:
    r = report()
    assert RunReport.from_dict(json.loads(json.dumps(r.to_dict()))) == r


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"communication_share": 1.5}, "communication_share.* is 1.5: a share is from 0 to 1"),
        ({"communication_share": -0.1}, "communication_share.* is -0.1: a share is from 0 to 1"),
        ({"communication_s": None}, "communication_share is measured against communication_s"),
        ({"communication_s": "5 ms"}, "field 'communication_s' must be a number or null"),
    ],
)
def test_a_damaged_figure_is_refused_on_load_naming_it(change, message) -> None:
    data = json.loads(json.dumps(report().to_dict()))
    data.update(change)
    with pytest.raises(ValueError, match=message):
        RunReport.from_dict(data)


def test_a_data_parallel_report_without_the_figures_says_why() -> None:
    r = report(communication=None)
    assert r.communication_share is None and "communication_share" not in r.notes  # one device
    world.aggregate(r, [dict(r.ranks[0], rank=0), dict(r.ranks[0], rank=1)])
    assert "not here" in r.notes["communication_share"]


def test_the_text_and_html_reports_show_each_ranks_wait() -> None:
    r = report()
    r.series = {
        "time_s": [1.0, 2.0],
        "step": [10.0, 20.0],
        "step_time_s": [0.04, 0.04],
        "samples_per_second": [1600.0, 1600.0],
        "input_wait_s": [0.001, 0.001],
    }
    world.aggregate(
        r, [dict(r.ranks[0], rank=0), dict(r.ranks[0], rank=1, communication_share=0.2)]
    )
    text = str(r)
    assert "all-reduce wait" in text and "rank 0 12.5%, rank 1 20.0%" in text
    page = r.to_html()
    assert "This rank waited for the gradient all-reduce 12.5% of each step" in page
    untimed = report(communication=None)
    world.aggregate(untimed, [dict(untimed.ranks[0], rank=0), dict(untimed.ranks[0], rank=1)])
    assert "all-reduce wait  - (the gradient all-reduce is timed in" in str(untimed)
