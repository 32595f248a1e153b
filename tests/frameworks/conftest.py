"""Each adapter test starts from, and leaves, the process state it found."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def clean_state(fresh_process: None) -> None:
    """Every test here starts from, and leaves, a fresh process state."""
