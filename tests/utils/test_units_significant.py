"""`significant` keeps any finite figure on one short line (the compare table's property
test drew a step time of 2.4e-277 s, which printed as 283 characters) and reads back as
the value it writes, to its four significant digits."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from accelkit.utils.units import PLAIN_DIGITS, duration, significant


# Up to 1e300: four digits of a float near the largest (1.7975e308) round past it.
@given(st.floats(min_value=-1e300, max_value=1e300))
def test_any_finite_value_is_short_and_reads_back(value: float) -> None:
    text = significant(value)
    assert len(text) <= PLAIN_DIGITS + 10, text
    assert math.isclose(float(text.replace(",", "")), value, rel_tol=5e-4, abs_tol=0.0)


def test_an_ordinary_figure_keeps_its_plain_digits() -> None:
    assert significant(0.000123456) == "0.0001235"
    assert significant(1234567.0) == "1,234,567"
    assert duration(2.4389e-277) == "2.439e-274 ms"
