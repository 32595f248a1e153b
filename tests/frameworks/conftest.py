"""Each adapter test starts from, and leaves, the process state it found."""

from __future__ import annotations

import os

import pytest

from accelkit.frameworks import _common


@pytest.fixture(autouse=True)
def clean_state():
    environ = dict(os.environ)
    _common._ours.clear()
    yield
    os.environ.clear()
    os.environ.update(environ)
    _common._ours.clear()
