"""A loaded report is checked field by field: a wrong type is a ValueError naming the
field (and, from a file, the file), never a failure later in a format string."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelkit.profiling.run_report import RunReport

from .helpers import json_values, names_field, saved_report

FIELDS = [f.name for f in dataclasses.fields(RunReport) if f.name != "trained_model"]
REQUIRED = ["framework", "model", "device", "precision", "matmul_dtype"]


@settings(max_examples=300, deadline=None)
@given(field=st.sampled_from(FIELDS), value=json_values)
def test_any_value_in_any_field_loads_as_itself_or_is_refused_by_name(field, value) -> None:
    try:
        report = RunReport.from_dict({**saved_report(), field: value})
    except ValueError as error:  # refused is as good an outcome as loaded: no pytest.raises
        assert names_field(str(error), field), str(error)  # noqa: PT017
    else:
        assert _as_saved(getattr(report, field)) == value


def _as_saved(value):
    """`value` as save writes it: NaN as null (a null where a number belongs loads as NaN)."""
    if isinstance(value, list):
        return [_as_saved(item) for item in value]
    if isinstance(value, dict):
        return {key: _as_saved(item) for key, item in value.items()}
    return None if isinstance(value, float) and math.isnan(value) else value


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("samples_per_second", "fast", "must be a number or null, got the string 'fast'"),
        ("steps", 2.5, "must be a whole number"),
        ("interrupted", "no", "must be true or false"),
        ("losses", [0.5, "x"], "'losses[1]' must be a number"),
        ("notes", {"mfu": 3}, "'notes.mfu' must be a string"),
        ("real_tokens_per_second", "many", "'real_tokens_per_second' must be a number or null"),
        ("history", {"loss": ["x"]}, "'history.loss[0]' must be a number"),
        ("epoch", [0, "1"], "'epoch[1]' must be a whole number"),
        ("params", [], "'params' must be an object"),
        ("tuning", "fast", "'tuning' must be an object or null"),
        ("tuning", {"speedup": "2x"}, "'tuning.speedup' must be a number or null"),
        ("tuning", {"candidates": [{"name": "eager"}]}, "'tuning.candidates[0].settings'"),
        (
            "tuning",
            {"candidates": [{"name": "e", "settings": {}, "spread": [1, "2"]}]},
            "'tuning.candidates[0].spread[1]' must be a number",
        ),
    ],
)
def test_wrong_types_are_refused_naming_the_field(field, value, words) -> None:
    with pytest.raises(ValueError, match="field") as caught:
        RunReport.from_dict({**saved_report(), field: value})
    assert words in str(caught.value)


@pytest.mark.parametrize("field", REQUIRED)
def test_a_missing_required_field_is_named(field) -> None:
    data = saved_report()
    del data[field]
    with pytest.raises(ValueError, match=f"missing required field '{field}'"):
        RunReport.from_dict(data)


def test_a_tuned_report_still_loads(tmp_path) -> None:
    from accelkit.profiling.tuning import Trial, TuneResult

    trials = (
        Trial(
            "eager",
            {"compile": False, "optimizer": "default"},
            "baseline",
            0.02,
            [0.019, 0.021],
            10,
        ),
        Trial(
            "eager+fused",
            {"compile": False, "optimizer": "fused"},
            "chosen",
            0.01,
            [0.0099, 0.011],
            10,
            None,
            "faster",
        ),
    )
    tuning = TuneResult("tuned", trials, False, "fused", 1.5, 20).to_dict()
    report = RunReport.from_dict(
        {
            **saved_report(),
            "tuning": tuning,
            "history": {"loss": [1.0, 0.5]},
            "epoch": [0, 1],
            "params": {"epochs": 2},
            "real_tokens_per_second": 3.5,
        }
    )
    report.save(tmp_path / "run.json")
    assert RunReport.load(tmp_path / "run.json") == report


@settings(max_examples=60, deadline=None)
@given(document=json_values)
def test_a_file_that_is_no_report_object_is_refused_naming_the_file(
    tmp_path_factory, document
) -> None:
    path = tmp_path_factory.mktemp("run") / "run.json"
    path.write_text(json.dumps(document))
    with pytest.raises(ValueError, match="is not an accelkit run report") as caught:
        RunReport.load(path)
    assert str(path) in str(caught.value)


def test_a_file_that_is_not_json_names_the_file(tmp_path) -> None:
    path = tmp_path / "run.json"
    path.write_bytes(b"\xff\xfe not json")
    with pytest.raises(ValueError, match="is not a JSON file") as caught:
        RunReport.load(path)
    assert str(path) in str(caught.value)
