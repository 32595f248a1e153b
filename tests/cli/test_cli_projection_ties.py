"""What-if projections that tie (issue 25): 8 x H100 SXM and 8 x H200 have the same
peaks, so at one MFU their epoch times are equal; the table `accelkit report --project`
prints named "fastest: 8 x H100" among them. Equal figures share a rank and are named
together as equal."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelkit.advisor.projection import EQUAL_WITHIN, leaders, project, projected, ranked
from accelkit.report.render import render_projections

pytestmark = pytest.mark.reliability

RUN = {
    "flops_per_step": 1e12,
    "batch_size": 32,
    "steps": 100,
    "framework": "torch",
    "facts": {"parameters": 10_000},  # an all-reduce that backward hides on any link
}
GPUS = st.sampled_from(["H100 SXM", "H200", "A100-SXM4-80GB", "L4", "Tesla T4", "H100"])


def test_a_lead_by_gpu_count_alone_is_said() -> None:
    """Input-bound: every step takes the measured wait, whatever the GPU (37.8 ms on all
    three); 8 x H100 is fastest per epoch by its count alone."""
    run = {**RUN, "flops_per_step": 1e9, "step_time_s": 0.0378, "input_wait_share": 0.999}
    found = [project(run, "H100 SXM", 8), project(run, "L4"), project(run, "Tesla T4")]
    assert [t for _, t, _ in ranked(found)] == [1, 2, 2]  # L4 and T4: the same estimate
    assert leaders(found) == [
        (
            "fastest: 8 x NVIDIA H100 SXM5 80GB (its step takes 37.76 ms, as on 2 other(s): "
            "it leads by its 8 GPUs alone)"
        )
    ]


def test_equal_step_times_are_named_equal_not_fastest() -> None:
    found = [project(RUN, "Tesla T4"), project(RUN, "H100 SXM", 8), project(RUN, "H200", 8)]
    assert [(p.key, t) for p, t, _ in ranked(found)] == [
        ("h100-sxm", 1),
        ("h200-sxm", 1),
        ("t4", 3),
    ]
    table = render_projections(found, width=200)
    assert "fastest:" not in table
    assert "equally fast: 8 x NVIDIA H100 SXM5 80GB, 8 x NVIDIA H200 SXM 141GB" in table


@given(
    st.lists(
        st.tuples(GPUS, st.integers(1, 16), st.none() | st.sampled_from([1.0, 2.5, 3.0])),
        min_size=1,
        max_size=6,
    )
)
def test_ranks_and_leaders_follow_the_figures(picks) -> None:
    every = [project(RUN, gpu, count, price_per_hour=price) for gpu, count, price in picks]
    found = projected(every)  # 16 x H100 SXM: across servers, not projected
    order = ranked(every)
    assert [p for p, _, _ in order] == sorted(found, key=lambda p: p.epoch_time_s)
    if not found:
        assert leaders(every) == []
        return
    best = min(p.epoch_time_s for p in found)
    first = [p for p, by_time, _ in order if by_time == 1]
    within = EQUAL_WITHIN
    assert len(first) == sum(p.epoch_time_s == pytest.approx(best, rel=within) for p in found)
    holders = {}  # rank -> the projection that took it, the first at that place
    for place, (p, rank, _) in enumerate(order, 1):
        holder = holders.setdefault(rank, p)
        assert rank == place if holder is p else rank < place
        assert p.epoch_time_s == pytest.approx(holder.epoch_time_s, rel=within)
    for a, b in itertools.pairwise(holders.values()):  # a new rank: beyond the tolerance
        assert b.epoch_time_s != pytest.approx(a.epoch_time_s, rel=within)
    lines = leaders(every)
    among = " of those projected" if len(found) < len(every) else ""
    assert lines[0].startswith(f"fastest{among}: " if len(first) == 1 else f"equally fast{among}: ")
    priced = [p for p in found if p.cost_per_epoch is not None]
    assert len(lines) == 1 + bool(priced)
