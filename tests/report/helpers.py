"""What the report-file tests share: a saved report as JSON, any JSON value, and report
files as the schema draws them."""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Any

from hypothesis import strategies as st

from accelkit.profiling.report_schema import INSIDE, SERIES_AXES
from accelkit.profiling.run_report import RunReport

# Any value a JSON file can hold, small.
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)


def saved_report() -> dict[str, Any]:
    """A small CPU run's report as its file holds it."""
    report = RunReport(
        framework="torch",
        model="m",
        device="cpu",
        precision="fp32",
        matmul_dtype="fp32",
        samples_per_second=10.0,
        steps=5,
    )
    return json.loads(json.dumps(report.to_dict()))


def names_field(message: str, field: str) -> bool:
    """Whether an error message names `field` (or a field inside it)."""
    return any(f"{quote}{field}{end}" in message for quote in "'\"" for end in "'\".[")


def from_hint(hint: Any) -> st.SearchStrategy[Any]:
    """JSON values of the shape `hint` (an annotation of the report schema) says, and
    now and then any JSON value in its place: what a report file may hold, and a little
    of what it may not."""
    if hint is Any:
        return json_values
    # one value in ten of any shape: enough files are refused, enough are taken
    return st.integers(0, 9).flatmap(lambda n: json_values if n == 0 else _shaped(hint))


def _shaped(hint: Any) -> st.SearchStrategy[Any]:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*(_shaped(arg) for arg in args))
    if origin is tuple and args[-1:] != (Ellipsis,):
        return st.tuples(*(from_hint(arg) for arg in args)).map(list)
    if origin in (list, tuple):
        return st.lists(from_hint(args[0]), max_size=3)
    if origin is dict:
        return st.dictionaries(st.text(max_size=4), from_hint(args[1]), max_size=3)
    if dataclasses.is_dataclass(hint) or typing.is_typeddict(hint):
        return _object(hint)
    scalars: dict[Any, st.SearchStrategy[Any]] = {
        type(None): st.none(),
        bool: st.booleans(),
        int: st.integers(-5, 10**6),
        float: st.none() | st.floats(-1e6, 1e15, allow_nan=False),
        str: st.text(max_size=8),
    }
    return scalars.get(hint, json_values)


def _object(cls: Any) -> st.SearchStrategy[dict[str, Any]]:
    """Objects with the keys of the dataclass or typed dict `cls`: the required ones always,
    the others now and then."""
    hints = typing.get_type_hints(cls)
    if typing.is_typeddict(cls):
        required = set(cls.__required_keys__)
    else:
        required = {
            f.name
            for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        }
    return st.fixed_dictionaries(
        {k: from_hint(hints[k]) for k in required},
        optional={k: from_hint(v) for k, v in hints.items() if k not in required},
    )


def _series() -> st.SearchStrategy[dict[str, Any]]:
    """Series whose columns on one axis mostly have one length."""
    numbers = st.none() | st.floats(-1e6, 1e6, allow_nan=False)

    def columns(names: tuple[str, ...]) -> st.SearchStrategy[dict[str, Any]]:
        return st.integers(0, 5).flatmap(
            lambda n: st.fixed_dictionaries(
                {},
                optional={
                    name: st.lists(numbers, min_size=n, max_size=n) | st.lists(numbers, max_size=6)
                    for name in names
                },
            )
        )

    axes = list(SERIES_AXES.values())
    return st.tuples(columns(axes[0]), columns(axes[1])).map(lambda pair: {**pair[0], **pair[1]})


def report_documents() -> st.SearchStrategy[dict[str, Any]]:
    """Report files as the schema draws them (`accelkit.profiling.report_schema`): every
    field of `RunReport` now and then, of its shape (`INSIDE` for the free-form ones)
    with any JSON value inside now and then."""
    hints = {
        f.name: INSIDE.get(f.name, typing.get_type_hints(RunReport)[f.name])
        for f in dataclasses.fields(RunReport)
        if f.name != "trained_model"
    }
    # Each field of its shape, any JSON value now and then inside it (a field of the wrong
    # type: test_a_field_of_the_wrong_type_exits_2_naming_file_and_field).
    optional = {name: _shaped(hint) for name, hint in hints.items()}
    optional["series"] = _series() | _shaped(hints["series"])
    return st.fixed_dictionaries({}, optional=optional).map(lambda d: {**saved_report(), **d})
