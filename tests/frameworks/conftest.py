"""Each adapter test starts from, and leaves, the process state it found."""

from __future__ import annotations

import os

import pytest

from accelkit.frameworks import _common


@pytest.fixture(autouse=True)
def clean_state():
    environ = dict(os.environ)
    # Some machine images export these; the tests start from an environment without them.
    for name in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "TF_GPU_THREAD_MODE",
                 "NCCL_P2P_DISABLE", "TF_FORCE_GPU_ALLOW_GROWTH"):
        os.environ.pop(name, None)
    _common._ours.clear()
    yield
    os.environ.clear()
    os.environ.update(environ)
    _common._ours.clear()
