"""Issue 37, E16: a parameter count is taken in any numeric type that holds a whole number
(NumPy's included); bools, strings and NaN are refused with the reason."""

from __future__ import annotations

import fractions
import importlib.util

import pytest
from hypothesis import given
from hypothesis import strategies as st

import accelkit
from accelkit.planning import Request
from accelkit.planning.types import MAX_PARAMS

HAS_NUMPY = importlib.util.find_spec("numpy") is not None
needs_numpy = pytest.mark.skipif(not HAS_NUMPY, reason="numpy is not installed")


class _Indexable:
    """A third-party integer: only ``__index__``, as `operator.index` reads it."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        return self.value

    def __repr__(self) -> str:
        return f"_Indexable({self.value})"


def _int_likes(count: int) -> list[object]:
    """`count` in the numeric types a script may hold it in."""
    values: list[object] = [count, float(count), fractions.Fraction(count), _Indexable(count)]
    if HAS_NUMPY:
        import numpy as np

        values += [np.int64(count), np.uint64(count), np.float64(count), np.float32(count)]
    return values


@needs_numpy
def test_numpy_int64_params_is_the_plan_of_the_int() -> None:
    import numpy as np

    by_numpy = accelkit.plan_for("H100", count=8, params=np.int64(8_000_000_000))
    by_float = accelkit.plan_for("H100", count=8, params=8e9)
    assert by_numpy.memory == by_float.memory
    assert type(by_numpy.memory.params) is int


@needs_numpy
def test_numpy_counts_for_gpus_trainable_params_and_activations() -> None:
    import numpy as np

    plan = accelkit.plan_for(
        "H100",
        count=np.int64(8),
        params=np.int32(1_000_000_000),
        trainable_params=np.int64(10_000_000),
        activation_bytes=np.uint64(2**30),
    )
    assert plan.hardware.gpu_count == 8
    assert plan.memory.trainable_params == 10_000_000
    assert plan.memory.activation_bytes == 2**30


@given(st.integers(min_value=1, max_value=MAX_PARAMS), st.data())
def test_every_int_like_whole_count_is_taken_exactly(count: int, data: st.DataObject) -> None:
    value = data.draw(st.sampled_from(_int_likes(count)))
    if int(value) != count:  # type: ignore[call-overload]  # floats hold not every int
        return
    assert Request(params=value).params == count
    assert type(Request(params=value).params) is int


@given(st.integers(min_value=1, max_value=MAX_PARAMS))
def test_whole_number_agrees_with_int_for_every_int_like(count: int) -> None:
    from accelkit.planning.types import whole_number

    for value in _int_likes(count):
        assert whole_number(value) == int(value)  # type: ignore[call-overload]


def _refused() -> list[tuple[object, str]]:
    values: list[tuple[object, str]] = [
        (True, "a bool"),
        (False, "a bool"),
        ("8e9", "a str"),
        (float("nan"), "not finite"),
        (float("inf"), "not finite"),
        (8.5, "not a whole number"),
        (0, "out of range"),
        (MAX_PARAMS + 1, "out of range"),
        ([8], "a list, not a number"),
    ]
    if HAS_NUMPY:
        import numpy as np

        values += [(np.True_, "a bool"), (np.float64("nan"), "not finite")]
    return values


@pytest.mark.parametrize(("value", "why"), _refused())
def test_bools_strings_and_nan_are_refused_with_the_reason(value: object, why: str) -> None:
    with pytest.raises(ValueError, match=f"params=.* is not valid \\({why}") as raised:
        accelkit.plan_for("H100", params=value)
    assert "whole number of parameters" in str(raised.value)


@pytest.mark.parametrize("value", [True, "1024", float("nan"), -1])
def test_activation_bytes_refusals_say_why(value: object) -> None:
    with pytest.raises(ValueError, match=r"activation_bytes=.* is not valid \("):
        Request(params=8e9, activation_bytes=value)  # type: ignore[arg-type]
