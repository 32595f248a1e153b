"""One intra-op thread for the Hugging Face tests' tiny models: on a loaded 2-core
machine two threads spin against each other (a 30 ms step took 500 ms), and the paired
timings of tests/hf/test_phases.py need steady steps."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
