"""Numbers in the units people read them in, for the text table and the HTML page alike.

A rate of FLOPs is written in GFLOP/s below one TFLOP/s, so that a CPU's 0.0112 TFLOP/s
reads as 11.21 GFLOP/s; a rate and the peak it is a share of are written with four
significant digits, so that the share shown beside them is what they give. Seconds
below one are milliseconds; money is dollars and cents, never an exponent.
"""

from __future__ import annotations

import math

_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def significant(value: float, digits: int = 4) -> str:
    """`value` with `digits` significant digits, thousands separated, no exponent, but
    where that would take more than `PLAIN_DIGITS` digits (a figure of an invalid or
    hand-made report, 2e-277 s): an exponent then, so a line stays a line.

    Example:
        >>> significant(0.0297), significant(989.4), significant(375974.2)
        ('0.02970', '989.4', '375,974')
        >>> significant(2.4389e-277), significant(3e19)
        ('2.439e-277', '3.000e+19')
    """
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    magnitude = math.floor(math.log10(abs(value)))
    decimals = max(0, digits - 1 - magnitude)
    if decimals > PLAIN_DIGITS or magnitude >= PLAIN_DIGITS:
        return f"{value:.{digits - 1}e}"
    return f"{value:,.{decimals}f}"


# The most digits `significant` writes without an exponent, after the point or before it.
PLAIN_DIGITS = 12


def per_second(value: float) -> str:
    """A count per second (samples, tokens): one decimal from 10 up, whole from 10,000 up,
    three significant digits below 10.

    Example:
        >>> per_second(1234.5), per_second(1.5472), per_second(375974.2)
        ('1,234.5', '1.55', '375,974')
    """
    if abs(value) >= 10_000:
        return f"{value:,.0f}"
    return f"{value:,.1f}" if abs(value) >= 10 else significant(value, 3)


def flops(count: float) -> str:
    """A number of FLOPs with its SI prefix.

    Example:
        >>> flops(5.798e10), flops(1.4e13)
        ('57.98 GFLOP', '14.00 TFLOP')
    """
    return _prefixed(count, "FLOP")


def flop_rate(tflops: float) -> str:
    """A rate given in TFLOP/s, in TFLOP/s from 1 up and in GFLOP/s (or less) below.

    Example:
        >>> flop_rate(321.3), flop_rate(0.011213)
        ('321.3 TFLOP/s', '11.21 GFLOP/s')
    """
    return _prefixed(tflops * 1e12, "FLOP/s") if tflops < 1 else f"{significant(tflops)} TFLOP/s"


def _prefixed(value: float, unit: str) -> str:
    scale, prefix = next(((s, p) for s, p in _PREFIXES if abs(value) >= s), (1.0, ""))
    return f"{value / scale:,.2f} {prefix}{unit}" if scale > 1 else f"{value:,.4g} {unit}"


def duration(seconds: float) -> str:
    """Seconds as ms below one second, s below two minutes, then min, then h beyond two
    hours (an epoch's projected time), four significant digits.

    Example:
        >>> duration(0.04358), duration(5.1706), duration(754.0), duration(12_600)
        ('43.58 ms', '5.171 s', '12.57 min', '3.500 h')
    """
    for limit, scale, unit in _DURATIONS:
        if abs(seconds) < limit:
            return f"{significant(seconds / scale)} {unit}"
    return f"{significant(seconds / 3600)} h"


_DURATIONS = ((1.0, 1e-3, "ms"), (120.0, 1.0, "s"), (7200.0, 60.0, "min"))


def gigabytes(count: float) -> str:
    """Bytes as GB (10⁹ bytes), two decimals.

    Example:
        >>> gigabytes(16.19e9)
        '16.19 GB'
    """
    return f"{count / 1e9:,.2f} GB"


def money(usd: float) -> str:
    """US dollars and cents; less than a cent is said so (the JSON keeps the number).

    Example:
        >>> money(1234.567), money(3.398e-05), money(0)
        ('$1,234.57', '< $0.01', '$0.00')
    """
    return "< $0.01" if 0 < usd < 0.005 else f"${usd:,.2f}"
