"""The scaling verdict where the run measured its wait for the gradient all-reduce:
the share, the Amdahl bound, the levers with their bounds, and the other causes."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelkit import what_if
from accelkit.advisor import Severity
from accelkit.advisor.context import Context
from accelkit.advisor.rules import scaling

from .helpers import measured_on

H200x4 = what_if("H200 SXM", 4)
GRADIENTS = {"gradient_bytes": 102_400_000, "buckets": 5, "in_flight_s": 0.012}


def ranks(*rows):
    """Per-rank figures as `accelkit.profiling.world.rank_figures` gives them:
    (step seconds, exposed all-reduce seconds[, input wait share])."""
    out = []
    for i, (step, wait, *rest) in enumerate(rows):
        out.append(
            {
                "rank": i,
                "devices": 1,
                "steady_samples": 100 * 64,
                "steady_seconds": step * 100,
                "steady_steps": 100,
                "samples_per_second": 64 / step,
                "step_time_s": step,
                "input_wait_share": rest[0] if rest else 0.01,
                "communication_s": wait,
                "communication_share": wait / step,
                "all_reduce_in_flight_s": 0.012,
            }
        )
    return out


def run(per_rank, efficiency=None, single=None, precision="bf16", facts=None, **figures):
    world = len(per_rank)
    return measured_on(
        H200x4,
        world_size=world,
        precision=precision,
        scaling_efficiency=efficiency,
        single_device_samples_per_second=single,
        global_samples_per_second=efficiency * world * single if efficiency else None,
        ranks=ranks(*per_rank),
        slowest_rank=max(range(world), key=lambda i: per_rank[i][0]),
        communication_s=per_rank[0][1],
        communication_share=per_rank[0][1] / per_rank[0][0],
        step_time_s=per_rank[0][0],
        facts={"batch_size": 64, "communication": GRADIENTS, **(facts or {})},
        **figures,
    )


def tuned(*candidates):
    """A report's tuning record: (name, status, median step s, DDP settings) per candidate."""
    return {
        "decision": "tuned",
        "compile": False,
        "candidates": [
            {
                "name": name,
                "status": status,
                "step_seconds": seconds,
                "settings": {"compile": False, **settings},
            }
            for name, status, seconds, settings in candidates
        ],
    }


def rule(m):
    return scaling.scaling(Context.build(H200x4, None, m))


def gains(text: str) -> list[float]:
    return [float(g) for g in re.findall(r"up to (\d+\.\d+)x", text)]


def test_a_quarter_of_each_step_waiting_names_the_levers_bounded_by_removing_it() -> None:
    # ResNet-50-like: 40 ms steps, 10 ms of each waiting for the all-reduce on every rank.
    found = rule(run([(0.040, 0.010)] * 4, efficiency=0.70, single=1900.0))
    assert found.id == "scaling" and found.severity is Severity.WARNING
    assert "25% of each step waits for the gradient all-reduce" in found.title
    assert "(102.4 MB of gradients per step, 5 buckets)" in found.title
    bound = 1 / (1 - 0.25)
    assert found.speedup == pytest.approx(bound)
    assert "1 / (1 - 0.250)" in found.expected_gain and "Amdahl" in found.expected_gain
    for gain in gains(found.action):  # printed to two decimals
        assert 1.0 <= gain <= bound + 0.005
    for lever in ("ddp={'compression': 'bf16'}", "per-device batch of 128", "accumulation_steps=4"):
        assert lever in found.action
    assert "bucket_cap_mb" in found.action and "static_graph" in found.action
    evidence = found.evidence
    assert evidence["all_reduce_wait_share"] == 0.25 and evidence["all_reduce_wait_ms"] == 10.0
    assert evidence["gradient_mb"] == 102.4 and evidence["buckets"] == 5
    assert evidence["all_reduce_in_flight_ms"] == 12.0
    assert evidence["waiting_for_slowest_rank_ms"] == 0.0
    # one device: 64 / 1900 = 33.7 ms per step; 6.3 ms lost, all of it in the wait
    assert evidence["single_device_step_ms"] == pytest.approx(33.684, abs=1e-3)
    assert evidence["elsewhere_ms"] == 0.0


def test_bf16_gradients_are_offered_only_under_a_bf16_plan_and_when_not_on() -> None:
    fp32 = rule(run([(0.040, 0.010)] * 2, efficiency=0.7, single=1900.0, precision="fp32"))
    assert "compression" not in fp32.action
    on = rule(
        run(
            [(0.040, 0.010)] * 2,
            efficiency=0.7,
            single=1900.0,
            facts={"ddp": {"compression": "bf16"}},
        )
    )
    assert "'compression': 'bf16'" not in on.action


def test_without_a_single_device_figure_the_share_alone_decides() -> None:
    assert rule(run([(0.040, 0.002)] * 2)) is None  # 5%: quiet
    info = rule(run([(0.040, 0.006)] * 2))  # 15%
    assert info.severity is Severity.INFO and "2 devices: 15% of each step" in info.title
    warning = rule(run([(0.040, 0.012)] * 2))  # 30%
    assert warning.severity is Severity.WARNING
    assert warning.speedup == pytest.approx(1 / (1 - 0.3))


def test_a_small_wait_says_the_all_reduce_is_not_the_cause_and_where_the_time_went() -> None:
    # The ResNet-50 at 64 per GPU: one GPU 2,448 img/s (26.1 ms a step), four
    # 7,496 img/s in all (34.2 ms a step); say 0.8 ms of it waits for the all-reduce.
    step = 64 * 4 / 7496
    found = rule(run([(step, 0.0008)] * 4, efficiency=7496 / (4 * 2448), single=2448.0))
    assert "the gradient all-reduce is not the cause: 2% of each step waits for it" in found.title
    assert found.evidence["lost_ms"] == pytest.approx((step - 64 / 2448) * 1e3, abs=1e-3)
    assert found.evidence["elsewhere_ms"] == pytest.approx(
        (step - 64 / 2448 - 0.0008) * 1e3, abs=1e-3
    )
    assert found.speedup == pytest.approx(1 / found.evidence["scaling_efficiency"], rel=1e-3)
    assert "torch.compile" in found.action  # the run was not compiled
    assert "accounts for at most 1.02x" in found.expected_gain


def test_where_the_all_reduce_is_not_the_cause_ddps_buffer_broadcast_is_named() -> None:
    step = 64 * 4 / 7496  # the ResNet-50 at 64 per GPU, as above
    facts = {"ddp": {"broadcast_buffers": True, "buffers": 159}}
    found = rule(run([(step, 0.0008)] * 4, efficiency=0.77, single=2448.0, facts=facts))
    assert "DDP broadcasts rank 0's 159 buffers before every forward" in found.action
    assert "ddp={'broadcast_buffers': False}" in found.action
    assert found.evidence["buffers"] == 159
    tuning = tuned(
        ("eager", "baseline", 0.034, {"broadcast_buffers": True}),
        ("eager+no-buffer-broadcast", "chosen", 0.030, {"broadcast_buffers": False}),
    )
    measured = rule(run([(step, 0.0008)] * 4, 0.77, 2448.0, facts=facts, tuning=tuning))
    assert "tune measured 1.13x the baseline's step: chosen" in measured.action
    assert measured.evidence["tune.no_buffer_broadcast.status"] == "chosen"
    for ddp in ({"broadcast_buffers": False, "buffers": 159}, {"buffers": 0}):
        quiet = rule(run([(step, 0.0008)] * 4, efficiency=0.77, single=2448.0, facts={"ddp": ddp}))
        assert "broadcast" not in quiet.action


def test_a_straggler_is_told_from_the_link() -> None:
    # rank 1 computes slower; the others wait for it at the all-reduce
    found = rule(
        run([(0.050, 0.012), (0.050, 0.002), (0.050, 0.012)], efficiency=0.8, single=1600.0)
    )
    assert found.evidence["all_reduce_wait_ms"] == 2.0  # the slowest rank's own wait
    assert found.evidence["waiting_for_slowest_rank_ms"] == 10.0
    assert "wait up to 10.00 ms per step for the slowest one" in found.action


def test_a_starved_rank_comes_first() -> None:
    found = rule(run([(0.040, 0.010, 0.01), (0.046, 0.001, 0.30)], efficiency=0.7, single=1900.0))
    assert "rank 1 waits longer for input" in found.title
    assert found.action.startswith("rank 1 waits longer for input")


def test_what_tune_measured_comes_before_the_estimate() -> None:
    tuning = tuned(
        ("eager", "baseline", 0.040, {"compression": "none", "bucket_cap_mb": 25}),
        ("eager+bf16-grads", "chosen", 0.036, {"compression": "bf16", "bucket_cap_mb": 25}),
        (
            "eager+bf16-grads+buckets-100MB",
            "slower",
            0.037,
            {"compression": "bf16", "bucket_cap_mb": 100},
        ),
    )
    found = rule(run([(0.040, 0.010)] * 2, efficiency=0.7, single=1900.0, tuning=tuning))
    assert "tune measured 1.11x the baseline's step: chosen" in found.action
    assert found.evidence["tune.bf16_grads.status"] == "chosen"
    assert found.evidence["tune.buckets.step_ms"] == 37.0


@given(
    st.floats(min_value=0.0, max_value=0.95, allow_nan=False),
    st.floats(min_value=0.05, max_value=0.899, allow_nan=False),
)
def test_every_gain_is_bounded_by_removing_the_wait_and_by_perfect_scaling(
    share: float, efficiency: float
) -> None:
    found = rule(run([(0.040, 0.040 * share)] * 2, efficiency=efficiency, single=1000.0))
    assert found is not None
    assert 1.0 <= found.speedup <= 1 / efficiency + 1e-9
    if share >= scaling.NOTABLE:
        assert found.speedup <= 1 / (1 - share) + 1e-9
        for gain in gains(found.action):  # printed to two decimals
            assert gain <= min(1 / (1 - share), 1 / efficiency) + 0.005
