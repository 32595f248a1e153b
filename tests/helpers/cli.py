"""The `accelkit` command in a subprocess, on this checkout's source."""

from __future__ import annotations

import os
import subprocess
import sys

SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")


def accelkit(*args: str, timeout: float = 300, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m accelkit ARGS`` with `env` added to this process's environment."""
    return subprocess.run(
        [sys.executable, "-m", "accelkit", *args],
        capture_output=True,
        check=False,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": SRC, **env},
    )
