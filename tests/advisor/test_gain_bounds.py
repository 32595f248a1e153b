"""Expected gains stay bounded and honest: 1 / (1 - share) only up to what the change
can do, for every share, and the ranking uses the bounded figure."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelkit import what_if
from accelkit.advisor import advise
from accelkit.advisor.context import Context
from accelkit.advisor.rules import compilation, input_wait, utilisation
from accelkit.advisor.types import removing_share
from accelkit.hardware.info import HardwareInfo

from .helpers import measured_on

H200 = what_if("H200")
CPU = HardwareInfo(source="cpu", cpu_count=8)

shares = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
caps = st.floats(min_value=1.0, max_value=64.0, allow_nan=False)


@given(shares, shares, caps)
def test_removing_a_share_is_finite_at_least_one_at_most_the_cap_and_monotonic(
    a: float, b: float, cap: float
) -> None:
    low, high = sorted((a, b))
    gain_low, gain_high = removing_share(low, cap), removing_share(high, cap)
    for gain in (gain_low, gain_high):
        assert math.isfinite(gain) and 1.0 <= gain <= cap
    assert gain_low <= gain_high


@given(shares)
def test_removing_a_share_is_the_plain_formula_below_the_cap(share: float) -> None:
    if share < 0.5:  # 1 / (1 - share) < 2
        assert removing_share(share, 2.0) == pytest.approx(1 / (1 - share))


def test_removing_a_share_refuses_an_infinite_cap() -> None:
    with pytest.raises(ValueError, match="finite"):
        removing_share(0.5, math.inf)
    assert removing_share(float("nan"), 3.0) == 1.0


def input_ctx(share: float, workers: int = 0, **loader):
    loader = {"type": "DataLoader", "num_workers": workers, **loader}
    return Context.build(
        CPU,
        None,
        measured_on(CPU, input_wait_share=share, step_time_s=0.01, facts={"loader": loader}),
    )


@given(shares, shares)
def test_input_bound_gain_is_bounded_by_the_workers_it_adds(a: float, b: float) -> None:
    # 8 cores, no GPU: 7 workers suggested; from none, they overlap the step: at most 8x.
    low, high = sorted((a, b))
    found = [input_wait.input_bound(input_ctx(s)) for s in (low, high)]
    gains = [f.speedup if f else 1.0 for f in found]
    assert all(math.isfinite(g) and 1.0 <= g <= 8.0 for g in gains)
    assert gains[0] <= gains[1]


def test_a_share_near_one_no_longer_claims_44x() -> None:
    """0.9775 of the step waiting gave "up to 44.40x"; the loader's 7 new workers can
    make it at most 8x, and the text says both numbers and why."""
    found = input_wait.input_bound(input_ctx(0.9775))
    assert found.speedup == pytest.approx(8.0)
    assert "44.44x if the wait" in found.expected_gain
    assert "at most 8.00x: 7 loading processes overlap the step" in found.expected_gain


def test_input_bound_with_workers_is_bounded_by_the_ratio_of_workers() -> None:
    found = input_wait.input_bound(input_ctx(0.9, workers=2))
    assert found.speedup == pytest.approx(7 / 2)
    assert "7 loading processes instead of 2" in found.expected_gain
    # Workers on every core already: claimed for a batch half as costly to prepare.
    found = input_wait.input_bound(input_ctx(0.9, workers=7))
    assert found.speedup == pytest.approx(2.0) and "half as costly" in found.expected_gain


def test_tf_data_gain_is_bounded_by_the_cores_or_the_prefetch() -> None:
    def tf_ctx(**loader):
        m = measured_on(
            CPU,
            framework="tensorflow",
            input_wait_share=0.95,
            facts={"loader": {"type": "tf.data.Dataset", **loader}},
        )
        return Context.build(CPU, None, m)

    serial_map = input_wait.input_bound(tf_ctx(map=1, parallel_map=0, prefetch=False))
    assert serial_map.speedup == pytest.approx(9.0)  # 8 cores + the overlap
    parallel = input_wait.input_bound(tf_ctx(map=1, parallel_map=1, prefetch=False))
    assert parallel.speedup == pytest.approx(2.0) and "prefetching" in parallel.expected_gain


@given(st.floats(min_value=0.0, max_value=100.0, allow_nan=False), shares)
def test_launch_overhead_gain_is_bounded_by_the_doubled_batch(util: float, wait: float) -> None:
    m = measured_on(H200, gpu_utilization=util, input_wait_share=wait * 0.19, step_time_s=0.004)
    found = utilisation.launch_overhead(Context.build(H200, None, m))
    if found is not None:
        assert math.isfinite(found.speedup) and 1.0 <= found.speedup <= 2.0


def test_launch_overhead_near_idle_claims_the_batch_bound_not_the_idle_share() -> None:
    m = measured_on(H200, gpu_utilization=2.25, input_wait_share=0.0, step_time_s=0.004)
    found = utilisation.launch_overhead(Context.build(H200, None, m))
    assert found.speedup == 2.0
    assert "44.44x if the idle share" in found.expected_gain and "at most 2x" in (
        found.expected_gain
    )


@given(shares, shares)
def test_compile_estimate_is_bounded_and_grows_with_the_non_matmul_share(
    a: float, b: float
) -> None:
    def estimate(mfu: float) -> float:
        m = measured_on(
            H200, mfu=mfu, input_wait_share=0.0, step_time_s=0.05, facts={"compiled": False}
        )
        found = compilation.torch_compile(Context.build(H200, None, m))
        return 1.0 if found is None else found.speedup  # quiet: too little to fuse

    low_mfu, high_mfu = sorted((a, b))
    more_rest, less_rest = estimate(low_mfu), estimate(high_mfu)
    for gain in (more_rest, less_rest):
        assert math.isfinite(gain) and 1.0 <= gain <= compilation.FUSION
    assert less_rest <= more_rest


def test_ranking_uses_the_bounded_figure() -> None:
    """An input wait of 95% behind a parallel tf.data map claims at most 2x (prefetching),
    not 1 / (1 - 0.95) = 20x, so a datasheet precision gain of 2.29x ranks above it.
    (Figures picked to show the order, not taken from one run.)"""
    a100 = what_if("A100-SXM4-80GB")
    loader = {"type": "tf.data.Dataset", "map": 1, "parallel_map": 1, "prefetch": False}
    m = measured_on(
        a100,
        framework="tensorflow",
        matmul_dtype="fp32",
        mfu=0.6,
        input_wait_share=0.95,
        facts={"loader": loader},
    )
    found = advise(a100, None, m)
    assert [a.id for a in found][:2] == ["precision", "input_bound"]
    assert found[0].speedup == pytest.approx(1 / (0.4 + 0.6 / 16))
    assert found[1].speedup == pytest.approx(2.0) and "20.00x if the wait" in (
        found[1].expected_gain
    )
