"""What a float format holds: integers exactly up to 2**p, and what it makes of the others.

A float with p significand bits (the implicit one included) holds every integer
up to 2**p; above that only every 2nd, then 4th, 8th... integer, and the rest
round to the nearest one it holds (ties to even: IEEE 754 round-to-nearest).
Token ids that pass through float16 (p = 11) are exact up to 2048, through
bfloat16 (p = 8) up to 256: 2049 -> 2048, 12345 -> 12344, 19999 -> 20000.

Significand bits and largest values are IEEE 754's (binary16, binary32) and
bfloat16's (8 significand bits, float32's exponent). The advisor's rules,
`accelkit.keras.checks` and `accelkit.torch.measuring.facts` read these limits here, so
they are written once. Plain Python, no framework.

Example:
    >>> exact_limit("float16"), exact_limit("bfloat16")
    (2048, 256)
    >>> rounded(12345, "float16"), rounded(19999, "float16")
    (12344.0, 20000.0)
"""

from __future__ import annotations

import math
from collections.abc import Iterable

# IEEE 754 binary16 and Google's bfloat16: significand bits and largest finite value.
_SIGNIFICAND_BITS = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}
_LARGEST = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38}

HALF_DTYPES = ("float16", "bfloat16")


def is_half(dtype: object) -> bool:
    """True for float16 and bfloat16 (a dtype object or its name).

    Example:
        >>> is_half("bfloat16"), is_half("float32"), is_half(None)
        (True, False, False)
    """
    return _name(dtype) in HALF_DTYPES


def exact_limit(dtype: object) -> int | None:
    """The largest N such that every integer 0..N is exact in `dtype` (2**p); None for a
    dtype that is not a float this module knows."""
    bits = _SIGNIFICAND_BITS.get(_name(dtype))
    return None if bits is None else 2**bits


def rounded(value: int, dtype: object) -> float:
    """What `dtype` makes of the integer `value`: itself when exact, else the nearest value
    it holds (ties to even), ``inf`` past its largest finite value."""
    bits = _SIGNIFICAND_BITS[_name(dtype)]
    sign, n = (-1 if value < 0 else 1), abs(int(value))
    if n <= 2**bits:
        return float(sign * n)
    step = 2 ** (n.bit_length() - bits)
    quotient, rest = divmod(n, step)
    if 2 * rest > step or (2 * rest == step and quotient % 2):
        quotient += 1
    result = float(quotient * step)
    if result > _LARGEST.get(_name(dtype), math.inf):
        return sign * math.inf
    return sign * result


def changed(values: Iterable[int], dtype: object) -> int:
    """How many of the integers `values` `dtype` does not hold exactly."""
    return sum(rounded(v, dtype) != v for v in values)


def changed_below(vocabulary: int, dtype: object) -> int:
    """How many of the ids 0..vocabulary-1 `dtype` rounds to another value.

    Example:
        >>> changed_below(2049, "float16"), changed_below(20000, "float16")
        (0, 14654)
    """
    bits = _SIGNIFICAND_BITS[_name(dtype)]
    largest = _LARGEST.get(_name(dtype), math.inf)
    held = min(vocabulary, 2**bits + 1)  # 0..2**p are all exact
    k = bits
    while 2**k < vocabulary:
        low, high = 2**k, min(2 ** (k + 1), vocabulary)
        step = 2 ** (k - bits + 1)
        top = min(high - 1, largest)
        if top >= low:
            held += int(top - low) // step + 1 - (1 if low == 2**bits else 0)
        k += 1
    return max(vocabulary - held, 0)


def out_of_range(vocabulary: int, dtype: object) -> int:
    """How many of the ids 0..vocabulary-1 `dtype` rounds up to the vocabulary size or past
    it: a lookup with them fails on the CPU (on a GPU, ``tf.gather`` returns zeros).

    Example:
        >>> out_of_range(20000, "float16")   # 19992..19999 -> 20000
        8
    """
    low, high = 0, vocabulary  # the first id that rounds to >= vocabulary: rounding is monotone
    while low < high:
        middle = (low + high) // 2
        if rounded(middle, dtype) >= vocabulary:
            high = middle
        else:
            low = middle + 1
    return vocabulary - low


def epsilon(dtype: object) -> float:
    """The spacing of `dtype` just above 1 (2**(1-p)): its relative precision.

    Example:
        >>> epsilon("float16"), epsilon("bfloat16")
        (0.0009765625, 0.0078125)
    """
    return 2.0 ** (1 - _SIGNIFICAND_BITS[_name(dtype)])


def largest(dtype: object) -> float:
    """The largest finite value of `dtype` (float16: 65504)."""
    return _LARGEST.get(_name(dtype), math.inf)


def examples(vocabulary: int, dtype: object) -> list[tuple[int, float]]:
    """A few ids of a vocabulary and what `dtype` makes of them: the first it misses, one
    in the middle, the last (which may round up to the vocabulary size: out of range).

    Example:
        >>> examples(20000, "float16")
        [(2049, 2048.0), (11025, 11024.0), (19999, 20000.0)]
    """
    limit = exact_limit(dtype)
    if limit is None or vocabulary - 1 <= limit:
        return []
    middle = (limit + vocabulary) // 2 | 1  # odd: never exact above the limit
    picks = sorted({limit + 1, min(middle, vocabulary - 1), vocabulary - 1})
    return [(v, rounded(v, dtype)) for v in picks if rounded(v, dtype) != v]


def _name(dtype: object) -> str:
    return str(getattr(dtype, "name", dtype)).replace("torch.", "")
