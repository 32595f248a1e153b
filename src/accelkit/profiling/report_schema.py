"""Checking a saved run report field by field before anything reads it: the one place
that says what a report file may hold.

The schema is the record's own dataclass: each field's annotation on `RunReport`
(and, inside ``tuning``, on `Trial` and `TuneResult`) says what a value must be, so a
new field is checked the day it is added, with no second list to keep in step. Inside
the fields the record keeps as free-form objects, `INSIDE` says what the readers of a
report (the text table, the HTML page, the advisor) take from them: ``hardware`` is a
`HardwareInfo`, ``plan`` a `SavedPlan`, each ``advice`` item a `SavedAdvice`, each of
``ranks`` a `SavedRank`; the columns of ``series`` on one time axis (`SERIES_AXES`)
have one length. A file this module accepts renders; one it refuses is named with
its field. No JSON Schema library is needed: the annotations use a handful of shapes
(numbers, strings, flags, lists, tuples, string-keyed objects, dataclasses, typed
dicts, unions with None), checked here.

A report that fails names the field (``tuning.candidates[1].step_seconds``) and what
it holds, so ``accelkit report`` can say which file and which field are wrong
instead of failing later in a format string.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import types
import typing
from collections.abc import Mapping
from typing import Any, TypedDict, is_typeddict

from accelkit.hardware.info import HardwareInfo
from accelkit.profiling.clock import WINDOW_COLUMNS
from accelkit.profiling.sampler import SERIES_COLUMNS
from accelkit.profiling.tuning import Trial, TuneResult

# Keys of ``report.tuning`` that `TuneResult.to_dict` derives rather than stores.
_TUNING_DERIVED: dict[str, Any] = {
    "baseline": str,
    "chosen": str,
    "speedup": float | None,
    "speedup_spread": list[float] | None,
    "cudagraphs": bool,
    "compile_mode": str | None,
    "candidates": list[dict[str, Any]],
}

# A figure that is a ratio to another: one without the other is a damaged report.
_NEEDS = {
    "mfu": ("peak_tflops",),
    "hfu": ("peak_tflops",),
    "precision_mfu": ("float8_share", "peak_tflops"),
    "mfu_calibrated": ("calibrated_tflops",),
    "communication_share": ("communication_s",),
}
# Shares of the step or of the run: from 0 to 1.
_SHARES = ("communication_share", "evaluation_share", "float8_share", "input_wait_share")


class SavedSetting(TypedDict, total=False):
    """One of ``plan.settings`` (`Setting.to_dict`)."""

    key: str
    value: Any
    framework: str | None
    reason: str
    kind: str
    status: str
    detail: str


class SavedPlan(TypedDict, total=False):
    """``plan`` (`Plan.to_dict`): every key optional, as a report without a plan has none."""

    framework: str
    precision: str
    distribution: str
    compile: bool
    settings: list[SavedSetting]
    env: dict[str, str]
    notes: list[str]
    hardware: HardwareInfo
    not_applied: str
    requested_distribution: str


class SavedAdvice(TypedDict, total=False):
    """One of ``advice`` (`Advice.to_dict`)."""

    id: str
    severity: str
    title: str
    evidence: dict[str, Any]
    action: str | None
    expected_gain: str | None
    speedup: float | None


class _Rank(TypedDict):
    rank: int


class SavedRank(_Rank, total=False):
    """One of ``ranks`` (`accelkit.profiling.world.rank_figures`)."""

    device: str
    devices: int
    steady_samples: float | None
    steady_seconds: float | None
    steady_steps: int | None
    samples_per_second: float | None
    step_time_s: float | None
    input_wait_share: float | None
    communication_s: float | None
    communication_share: float | None
    all_reduce_in_flight_s: float | None


# What the free-form fields of `RunReport` hold, where a reader takes something from them.
INSIDE: dict[str, Any] = {
    "hardware": HardwareInfo,
    "plan": SavedPlan,
    "advice": list[SavedAdvice],
    "ranks": list[SavedRank],
}
# The columns of ``series`` by the time axis they are drawn on: the clock's windows
# (`accelkit.profiling.clock`) end at ``time_s``, the NVML ticks at ``gpu_time_s``.
SERIES_AXES = {
    "time_s": WINDOW_COLUMNS,
    "gpu_time_s": ("gpu_time_s", *SERIES_COLUMNS[1:]),
}


def read_json(path: str | os.PathLike[str]) -> Any:
    """The JSON document at `path`.

    Raises:
        OSError: the file cannot be opened.
        ValueError: it is not UTF-8 JSON, or is nested too deeply to decode; the message
            names the file.
    """
    with open(path, encoding="utf-8") as handle:
        try:
            return json.load(handle)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ValueError(f"{os.fspath(path)} is not a JSON file: {error}") from None
        except RecursionError:  # json's decoder recurses once per nested list or object
            raise ValueError(
                f"{os.fspath(path)} is not a run report: its JSON is nested too deeply to read"
            ) from None


def check_report(data: Any, cls: type) -> dict[str, Any]:
    """`check_fields` for the run report `cls` (`RunReport`), then its ``tuning``
    (`check_tuning`) and the figures that only mean something with another.

    Raises:
        ValueError: naming the field.
    """
    values = check_fields(data, cls)
    if "tuning" in values:
        values["tuning"] = check_tuning(values["tuning"])
    for name, shape in INSIDE.items():
        if name in values:
            check_value(values[name], shape, name)
    check_series(values.get("series") or {})
    for figure, basis in ((f, b) for f, bases in _NEEDS.items() for b in bases):
        if values.get(figure) is not None and values.get(basis) is None:
            raise ValueError(
                f"field {figure!r} is {values[figure]!r} but {basis!r} is "
                f"{'missing' if basis not in values else 'null'}: {figure} is "
                f"measured against {basis}"
            )
    for share in _SHARES:
        value = values.get(share)
        if value is not None and not 0.0 <= value <= 1.0:
            raise ValueError(f"field {share!r} is {value!r}: a share is from 0 to 1")
    return values


def check_series(series: Mapping[str, list[Any]]) -> None:
    """Raise ValueError naming the column unless the columns of ``series`` on each time
    axis (`SERIES_AXES`) have one length: each point of a chart is one row of them.

    Example:
        >>> check_series({"time_s": [1.0, 2.0], "step_time_s": [0.1]})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ValueError: field 'series.step_time_s' has 1 value and 'series.time_s' 2: ...
    """
    for columns in SERIES_AXES.values():
        present = [name for name in columns if name in series]
        for name in present[1:]:
            first = present[0]
            if len(series[name]) != len(series[first]):
                count = len(series[name])
                raise ValueError(
                    f"field 'series.{name}' has {count} value{'s' if count != 1 else ''} and "
                    f"'series.{first}' {len(series[first])}: the columns on one time axis "
                    "are the rows of one table, of one length"
                )


def check_fields(data: Any, cls: type, where: str = "") -> dict[str, Any]:
    """The entries of `data` that are fields of the dataclass `cls`, checked against
    the fields' annotations; keys `cls` does not have (a newer report's) are dropped.

    Args:
        data: a decoded JSON object.
        cls: the dataclass whose fields it fills (`RunReport`, `Trial`).
        where: the dotted path of `data` in the report, for messages ('' at the top).

    Raises:
        ValueError: `data` is not an object, a field without a default is missing, or a
            value has the wrong type; the message names the field.

    Example:
        >>> check_fields({"name": "eager", "settings": {}, "steps": "3"}, Trial)
        Traceback (most recent call last):
        ValueError: field 'steps' must be a whole number, got the string '3'
    """
    if not isinstance(data, Mapping):  # a file's content: ValueError, as json's own errors
        raise ValueError(  # noqa: TRY004
            f"{_field(where) if where else 'the report'} must be an object, got {describe(data)}"
        )
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    missing = [
        name
        for name, f in fields.items()
        if name not in data
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        names = ", ".join(repr(_join(where, name)) for name in missing)
        raise ValueError(f"missing required field{'s' if len(missing) > 1 else ''} {names}")
    values = {name: data[name] for name in fields if name in data}
    for name, value in values.items():
        check_value(value, hints[name], _join(where, name))
    return {name: _restored(value, hints[name]) for name, value in values.items()}


def check_tuning(tuning: Any, where: str = "tuning") -> dict[str, Any] | None:
    """Check ``report.tuning`` (`TuneResult.to_dict`'s mapping, or None), and return it
    with the nulls that stand for NaN read back as NaN (`check_fields`).

    Every key is optional, as `TuneResult.from_dict` reads them; those present must
    have `TuneResult`'s types, and each candidate `Trial`'s.

    Raises:
        ValueError: naming the field, e.g. ``tuning.candidates[0].spread``.
    """
    if tuning is None:
        return None
    check_value(tuning, dict[str, Any], where)
    expected = {**_hints(TuneResult), **_TUNING_DERIVED}
    restored = dict(tuning)
    for key, hint in expected.items():
        if key in tuning and key != "trials":
            check_value(tuning[key], hint, _join(where, key))
            restored[key] = _restored(tuning[key], hint)
    if tuning.get("candidates"):
        restored["candidates"] = [
            {**candidate, **check_fields(candidate, Trial, f"{where}.candidates[{index}]")}
            for index, candidate in enumerate(tuning["candidates"])
        ]
    return restored


def check_value(value: Any, hint: Any, where: str) -> None:
    """Raise ValueError naming `where` unless `value` (decoded JSON) fits `hint`."""
    problem = _mismatch(value, hint, where)
    if problem:
        raise ValueError(problem)


def _mismatch(value: Any, hint: Any, where: str) -> str | None:
    """Why `value` does not fit `hint`, naming the innermost field; None when it fits."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return None
    if origin in (typing.Union, types.UnionType):
        if any(_mismatch(value, arg, where) is None for arg in args):
            return None
        # one non-None alternative that is a container: report the innermost field
        inner = [arg for arg in args if arg is not type(None)]
        if (
            len(inner) == 1
            and isinstance(value, (list, dict))
            and typing.get_origin(inner[0]) in (list, dict)
        ):
            return _mismatch(value, inner[0], where)
        return _wrong(value, hint, where)
    if origin is tuple and args[-1:] != (Ellipsis,):  # a fixed pair: (major, minor)
        if not isinstance(value, list) or len(value) != len(args):
            return _wrong(value, hint, where)
        return next(
            (p for i, item in enumerate(value) if (p := _mismatch(item, args[i], f"{where}[{i}]"))),
            None,
        )
    if origin in (list, tuple):
        if not isinstance(value, list):
            return _wrong(value, hint, where)
        return next(
            (p for i, item in enumerate(value) if (p := _mismatch(item, args[0], f"{where}[{i}]"))),
            None,
        )
    if dataclasses.is_dataclass(hint) or is_typeddict(hint):
        return _object_mismatch(value, hint, where)
    if origin in (dict, Mapping) or hint in (dict, Mapping):
        if not isinstance(value, dict):
            return _wrong(value, hint, where)
        item_hint = args[1] if args else Any
        return next(
            (
                p
                for key, item in value.items()
                if (p := _mismatch(item, item_hint, _join(where, str(key))))
            ),
            None,
        )
    return None if _is_scalar(value, hint) else _wrong(value, hint, where)


def _object_mismatch(value: Any, cls: Any, where: str) -> str | None:
    """Why `value` is not an object whose keys fit the dataclass or typed dict `cls`
    (keys `cls` lacks pass: a newer report's); None when it is."""
    if not isinstance(value, dict):
        return f"{_field(where)} must be an object, got {describe(value)}"
    if is_typeddict(cls):
        required: frozenset[str] = cls.__required_keys__
    else:
        required = frozenset(
            f.name
            for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        )
    missing = sorted(required - set(value))
    if missing:
        return f"missing required field {_join(where, missing[0])!r}"
    hints = _hints(cls)
    return next(
        (
            p
            for key, item in value.items()
            if key in hints and (p := _mismatch(item, hints[key], _join(where, key)))
        ),
        None,
    )


def _restored(value: Any, hint: Any) -> Any:
    """`value` (checked against `hint`) with each null where `hint` says a bare float
    read back as NaN: `RunReport.save` writes NaN and infinity as null (JSON has
    neither), and a loss that went NaN (``losses: [null]``) must load as it was saved."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is float:
        return math.nan if value is None else value
    if origin in (typing.Union, types.UnionType):  # an optional list: null stays null
        inner = [arg for arg in args if arg is not type(None)]
        return _restored(value, inner[0]) if len(inner) == 1 and value is not None else value
    if origin is list and args and isinstance(value, list):
        return [_restored(item, args[0]) for item in value]
    if origin in (dict, Mapping) and len(args) == 2 and isinstance(value, dict):
        return {key: _restored(item, args[1]) for key, item in value.items()}
    return value  # Any and the other scalars are as read


def _is_scalar(value: Any, hint: Any) -> bool:
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:  # JSON writes 2.0 as 2, and save writes NaN and infinity as null
        return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))
    return isinstance(value, hint) if isinstance(hint, type) else True


def _wrong(value: Any, hint: Any, where: str) -> str:
    return f"{_field(where)} must be {_expected(hint)}, got {describe(value)}"


def _expected(hint: Any) -> str:
    """`hint` in words: 'a number or null', 'a list of numbers'."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_expected(arg) for arg in args)
    if origin is tuple and args[-1:] != (Ellipsis,):
        return f"a list of {len(args)} items"
    if origin in (list, tuple):
        return (
            f"a list of {_expected(args[0]).removeprefix('a ').removeprefix('an ')}s"
            if args and args[0] is not Any
            else "a list"
        )
    if dataclasses.is_dataclass(hint) or is_typeddict(hint):
        return "an object"
    if origin in (dict, Mapping) or hint in (dict, Mapping):
        return "an object"
    return {
        type(None): "null",
        bool: "true or false",
        int: "a whole number",
        float: "a number",
        str: "a string",
    }.get(hint, getattr(hint, "__name__", str(hint)))


def describe(value: Any) -> str:
    """A decoded JSON value in words: 'the string \'abc\'', 'a list of 3 items'."""
    kind = {
        type(None): "null",
        bool: "a boolean",
        int: "the number",
        float: "the number",
        str: "the string",
        list: "a list",
        dict: "an object",
    }.get(type(value), "a value")
    if isinstance(value, (list, dict)):
        return f"{kind} of {len(value)} item{'s' if len(value) != 1 else ''}"
    text = repr(value)
    return kind if value is None else f"{kind} {text[:60]}{'...' if len(text) > 60 else ''}"


def _field(where: str) -> str:
    return f"field {where!r}"


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)
