"""`accelkit bench` without the framework it trains with (issue 25): a message with the
install command and exit 2, as the library gives, never a raw `No module named 'torch'`
traceback. The framework is made missing in a subprocess (None in sys.modules: what
Python does for a module that cannot be imported)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")
pytestmark = pytest.mark.reliability

_WITHOUT = """
import sys
for name in {missing!r}:
    sys.modules[name] = None
from accelkit.cli import main
sys.exit(main({argv!r}))
"""


def _bench_without(missing: tuple[str, ...], *argv: str) -> subprocess.CompletedProcess[str]:
    code = _WITHOUT.format(missing=missing, argv=["bench", "--steps", "2", *argv])
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": SRC},
    )


@pytest.mark.parametrize(
    ("missing", "argv", "hint"),
    [
        (("torch", "tensorflow", "keras"), (), "pip install 'accelkit[torch]' or pip install"),
        (("torch",), ("--framework", "torch"), "pip install 'accelkit[torch]'"),
        (("keras",), ("--framework", "tensorflow"), "pip install 'accelkit[tensorflow]'"),
        (("tensorflow",), ("--framework", "tensorflow", "--json"), "accelkit[tensorflow]"),
    ],
)
def test_bench_without_its_framework_says_how_to_install_it(missing, argv, hint) -> None:
    done = _bench_without(missing, *argv)
    assert done.returncode == 2, done.stderr[-1500:]
    assert "Traceback" not in done.stderr and hint in done.stderr
    assert done.stderr.startswith("accelkit: bench needs") and not done.stdout
