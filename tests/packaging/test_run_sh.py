"""`./run.sh` installs what each command runs (issue 25): the demo the CPU build of
PyTorch and accelkit only (it trains a torch model: TensorFlow's ~2 GB bought nothing),
the test suite everything; each keeps its own stamp, so a demo's set-up never makes
`./run.sh test` skip installing TensorFlow.

run.sh runs here on a copy, with a stand-in Python that records each call and installs
nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Creates the virtualenv's python and accelkit as copies of itself; logs every call.
STAND_IN = """#!/usr/bin/env bash
echo "$(basename "$0") $*" >> "$CALLS"
if [ "${1:-}" = -m ] && [ "${2:-}" = venv ]; then
    mkdir -p "$3/bin" && cp "$0" "$3/bin/python" && cp "$0" "$3/bin/accelkit"
fi
"""


@pytest.fixture
def checkout(tmp_path) -> Path:
    if shutil.which("bash") is None or shutil.which("sha256sum") is None:
        pytest.skip("run.sh needs bash and sha256sum")
    for name in ("run.sh", "pyproject.toml"):
        shutil.copy2(ROOT / name, tmp_path / name)
    python = tmp_path / "stand-in-python"
    python.write_text(STAND_IN)
    python.chmod(0o755)
    return tmp_path


def run_sh(checkout: Path, *args: str) -> list[str]:
    """The pip installs that ``./run.sh args`` made, in order."""
    calls = checkout / "calls.log"
    calls.unlink(missing_ok=True)
    env = {**os.environ, "PYTHON": str(checkout / "stand-in-python"), "CALLS": str(calls)}
    done = subprocess.run(
        ["bash", str(checkout / "run.sh"), *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = calls.read_text().splitlines() if calls.exists() else []
    return [line for line in lines if " pip install " in line and "--upgrade pip" not in line]


def test_the_demo_installs_torch_and_accelkit_only(checkout) -> None:
    installs = " ".join(run_sh(checkout, "demo"))
    assert "torch==" in installs and "-e .[torch]" in installs
    assert "tensorflow" not in installs and "dev" not in installs


def test_the_test_suite_installs_tensorflow_and_the_dev_extras_after_a_demo(checkout) -> None:
    run_sh(checkout, "demo")
    installs = " ".join(run_sh(checkout, "test"))
    assert "tensorflow>=" in installs and "dev]" in installs


def test_each_command_installs_once_and_again_when_pyproject_changes(checkout) -> None:
    assert run_sh(checkout, "test")
    assert run_sh(checkout, "demo")
    assert run_sh(checkout, "test", "-k", "nothing") == []
    assert run_sh(checkout, "demo") == []
    with (checkout / "pyproject.toml").open("a") as pyproject:
        pyproject.write("\n# changed\n")
    assert run_sh(checkout, "demo")


def test_the_demo_installs_numpy_and_projects_its_gpt_onto_an_h200(checkout) -> None:
    # torch warns "Failed to initialize NumPy" at the top of the bench without it (issue 39)
    assert any("numpy" in line.split() for line in run_sh(checkout, "demo"))
    calls = (checkout / "calls.log").read_text()
    bench = next(line for line in calls.splitlines() if line.startswith("accelkit bench"))
    assert "--project H200" in bench
