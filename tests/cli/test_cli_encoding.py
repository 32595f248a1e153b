"""The commands on a stdout that is not UTF-8 (``PYTHONIOENCODING=ascii``, ``LC_ALL=C``):
what the stream cannot encode is printed as an escape, never an exit 2 with nothing printed."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelkit.cli import main

from ..report.helpers import saved_report

SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")

# Printable names: letters and digits of any script, as a model class may have.
names = st.text(st.characters(categories=("L", "N")), min_size=1, max_size=16)


def _saved(model: str) -> str:
    handle, path = tempfile.mkstemp(suffix=".json")
    with os.fdopen(handle, "w") as out:
        json.dump({**saved_report(), "model": model}, out)
    return path


@settings(max_examples=100, deadline=None)
@given(model=names, encoding=st.sampled_from(["ascii", "latin-1", "cp1252", "utf-8"]))
def test_report_prints_any_model_name_on_any_stdout(model: str, encoding: str) -> None:
    """Issue faults4 E11: a model class named Réseau gave exit 2 and no output in ASCII."""
    path = _saved(model)
    stdout = io.TextIOWrapper(io.BytesIO(), encoding=encoding)
    try:
        with contextlib.redirect_stdout(stdout):
            code = main(["report", path])
        stdout.flush()
    finally:
        os.unlink(path)
    assert code == 0
    out = stdout.buffer.getvalue().decode(encoding)
    assert model.encode(encoding, "backslashreplace").decode(encoding) in out


@pytest.mark.parametrize(
    "environ",
    [
        {"PYTHONIOENCODING": "ascii"},
        {"LC_ALL": "C", "LANG": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0"},
    ],
)
def test_report_on_an_ascii_terminal_escapes_what_it_cannot_print(environ) -> None:
    path = _saved("Réseau")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONIOENCODING", "PYTHONUTF8")}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "accelkit", "report", path],
            check=False,
            capture_output=True,
            timeout=120,
            env={**env, **environ, "PYTHONPATH": SRC},
        )
    finally:
        os.unlink(path)
    assert done.returncode == 0, done.stderr
    assert b"R\\xe9seau" in done.stdout and done.stderr == b""
