"""benchmarks/step_levers.py: the GPU's idle time between kernels, from a profile's
kernel intervals (plain data here; the script itself runs on the H200)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import step_levers


def kernel(name: str, start: int, end: int, *, device: str = "CUDA") -> SimpleNamespace:
    return SimpleNamespace(
        name=name,
        device_type=SimpleNamespace(name=device),
        is_user_annotation=False,
        time_range=SimpleNamespace(start=start, end=end),
    )


def profile_of(*events: SimpleNamespace) -> SimpleNamespace:
    return SimpleNamespace(events=lambda: list(events))


def covered(intervals: list[tuple[int, int]]) -> int:
    """Microseconds inside at least one interval."""
    total, reach = 0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total, reach = total + end - start, end
        elif end > reach:
            total, reach = total + end - reach, end
    return total


def test_gaps_are_between_kernels_and_name_the_kernels_around_them() -> None:
    profile = profile_of(
        kernel("c", 50, 60),
        kernel("a", 0, 10),
        kernel("b", 5, 20),  # overlaps a: no gap between them
        kernel("cpu op", 20, 50, device="CPU"),  # not a kernel: the GPU was idle
    )
    result = step_levers.idle(profile, steps=1)
    assert result["idle_ms"] == 30 / 1e3
    assert result["largest"] == [[30, "b", "c"]]


@given(
    st.lists(
        st.tuples(st.integers(0, 10_000), st.integers(1, 500)).map(lambda p: (p[0], p[0] + p[1])),
        min_size=1,
        max_size=40,
    ),
    st.integers(1, 4),
)
def test_idle_time_is_the_span_less_the_time_some_kernel_runs(
    intervals: list[tuple[int, int]], steps: int
) -> None:
    events = [kernel(f"k{i}", start, end) for i, (start, end) in enumerate(intervals)]
    result = step_levers.idle(profile_of(*events), steps=steps, count=3)
    span = max(end for _, end in intervals) - min(start for start, _ in intervals)
    assert abs(result["idle_ms"] * 1e3 * steps - (span - covered(intervals))) < 1e-6
    gaps = [gap for gap, _, _ in result["largest"]]
    assert gaps == sorted(gaps, reverse=True) and len(gaps) <= 3
    assert all(gap > 0 for gap in gaps)
