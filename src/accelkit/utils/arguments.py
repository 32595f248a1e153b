"""Checks of public numeric arguments, each failing with a `ValueError` that names the
argument, the value and what is valid (`True` is not a number here, NaN not a size);
and `renamed`, for an argument still accepted under its former name."""

from __future__ import annotations

import math
import numbers
import warnings
from typing import TypeVar

T = TypeVar("T")


def whole(name: str, value: object, minimum: int, *, none: str | None = None) -> int | None:
    """`value` as an int >= `minimum`; None allowed when `none` says what it means.

    Example:
        >>> whole("steps", None, 1, none="whole epochs") is None
        True
    """
    if value is None and none is not None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        also = f", or None for {none}" if none is not None else ""
        raise ValueError(f"{name}={value!r} must be a whole number >= {minimum}{also}")
    return int(value)


def positive(name: str, value: object, *, none: str | None = None) -> float | None:
    """`value` as a finite float > 0; None allowed when `none` says what it means.

    Example:
        >>> positive("max_grad_norm", -1, none="no clipping")
        Traceback (most recent call last):
        ValueError: max_grad_norm=-1 must be a finite number > 0, or None for no clipping
    """
    if value is None and none is not None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not math.isfinite(value)
        or value <= 0
    ):
        also = f", or None for {none}" if none is not None else ""
        raise ValueError(f"{name}={value!r} must be a finite number > 0{also}")
    return float(value)


def renamed(value: T, former: T | None, names: tuple[str, str]) -> T | None:
    """`value`, or the value given under the argument's former name with a
    DeprecationWarning; both given is a TypeError. `names` is (name, former name).

    Example:
        >>> renamed(2.0, None, ("single_device", "rate"))
        2.0
    """
    name, former_name = names
    if former is None:
        return value
    if value is not None:
        raise TypeError(f"give {name}= only ({former_name}= is its former name)")
    warnings.warn(f"{former_name}= is now {name}=", DeprecationWarning, stacklevel=3)
    return former
