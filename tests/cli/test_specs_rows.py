"""`accelkit specs`: one row per GPU within 80 columns; `--long` the blocks with sources."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from accelkit import specs
from accelkit.cli import main
from accelkit.cli.specs import DTYPES, ROW_WIDTH, short

ROWS = list(specs.all_specs())


def _run(*args: str) -> str:
    """What `accelkit specs ARGS` prints on stdout."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["specs", *args]) == 0
    return out.getvalue()


def test_default_is_one_line_per_gpu_within_80_columns() -> None:
    lines = _run().splitlines()
    assert len(lines) == len(ROWS) + 2  # the title, the header, a row per GPU
    assert all(len(line) <= ROW_WIDTH for line in lines), max(lines, key=len)
    for row in ROWS:
        assert any(line.startswith(row.name.removeprefix("NVIDIA ")) for line in lines)


def test_every_figure_of_a_row_is_on_its_line() -> None:
    h200 = specs.lookup("H200")
    assert h200 is not None
    line = short([h200]).splitlines()[-1]
    for dtype in DTYPES:
        value = h200.peak(dtype)
        assert value is not None and f"{value:g}" in line.split()


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(st.sampled_from(ROWS), min_size=1, max_size=12),
    name=st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=120),
)
def test_any_rows_and_any_name_fit_80_columns_keeping_the_numbers(
    rows: list[specs.GpuSpec], name: str
) -> None:
    renamed = [*rows, dataclasses.replace(rows[0], name=name or "x")]
    lines = short(renamed).splitlines()
    assert all(len(line) <= ROW_WIDTH for line in lines)
    assert len(lines) == len(renamed) + 2
    # a long name is cut, never a number: the last row ends with the same figures
    assert lines[-1].split()[-len(DTYPES) :] == lines[2].split()[-len(DTYPES) :]


def test_long_keeps_the_blocks_with_sources() -> None:
    text = _run("--long")
    for row in ROWS:
        assert row.name in text
        assert row.source.split()[0] in text
    assert len(text.splitlines()) > 3 * len(ROWS)


def test_gpu_shows_its_source() -> None:
    assert specs.lookup("H200").source.split()[0] in _run("--gpu", "H200")  # type: ignore[union-attr]


def test_json_is_unchanged_by_the_short_table() -> None:
    assert json.loads(_run("--json")) == {"gpus": [r.to_dict() for r in ROWS]}
    assert json.loads(_run("--json", "--long")) == json.loads(_run("--json"))
