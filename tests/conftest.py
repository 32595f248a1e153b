"""Markers that skip with a reason: `gpu` (needs CUDA), `torch`, `tensorflow`.

@pytest.mark.gpu
def test_on_h200(): ...
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))

# Quiet TensorFlow's start-up logging in test output.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def _cuda_reason() -> str | None:
    if not _installed("torch"):
        return "needs an NVIDIA GPU: torch is not installed"
    import torch

    if not torch.cuda.is_available():
        return "needs an NVIDIA GPU: torch.cuda.is_available() is False"
    return None


# Bad-input and fault tests that live beside the code they test (docs/reliability.md).
RELIABILITY_MODULES = frozenset(
    {
        "test_report_schema.py",
        "test_cli_report_files.py",
        "test_cli_counts.py",
        "test_what_if_bounds.py",
        "test_rule_needs.py",
        "test_gain_bounds.py",
        "test_launch_advice.py",
        "test_torch_batches.py",
        "test_torch_determinism.py",
        "test_peak_unknown.py",
        "test_tune.py",
        "test_torch_failures.py",
    }
)


def _in_reliability_suite(item: pytest.Item) -> bool:
    """The fault-injection and bad-input suite: tests/reliability/, test modules named
    ``test_*reliability*.py`` or ``test_*_properties.py``, `RELIABILITY_MODULES`, and
    tests marked ``reliability`` (docs/reliability.md)."""
    path = str(getattr(item, "path", ""))
    name = os.path.basename(path)
    return (
        f"{os.sep}reliability{os.sep}" in path
        or "reliability" in name
        or name.endswith("_properties.py")
        or name in RELIABILITY_MODULES
        or "reliability" in item.keywords
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reasons: dict[str, str | None] = {}
    for item in items:
        if _in_reliability_suite(item):
            item.add_marker(pytest.mark.reliability)
        for marker in ("torch", "tensorflow", "gpu"):
            if marker not in item.keywords:
                continue
            if marker not in reasons:
                if marker == "gpu":
                    reasons[marker] = _cuda_reason()
                else:
                    reasons[marker] = None if _installed(marker) else f"needs {marker} installed"
            if reasons[marker]:
                item.add_marker(pytest.mark.skip(reason=reasons[marker]))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print the reliability suite's case count, so CI's log shows what it ran."""
    outcomes: dict[str, int] = {}
    for outcome in ("passed", "failed", "skipped", "error"):
        for report in terminalreporter.stats.get(outcome, ()):
            counted = report.when == "call" or outcome in ("skipped", "error")
            if counted and "reliability" in getattr(report, "keywords", {}):
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
    total = sum(outcomes.values())
    if total:
        detail = ", ".join(f"{n} {k}" for k, n in sorted(outcomes.items()))
        terminalreporter.write_line(
            f"reliability suite (fault injection, bad input): {total} cases: {detail}"
        )


# Variables some machine images export (the GPU image sets the allocator's), and
# accelkit's own: tests that apply plans start from an environment without them.
PROCESS_VARIABLES = (
    "ACCELKIT_DISABLE",
    "ACCELKIT_PRECISION",
    "RANK",
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_ALLOC_CONF",
    "TF_GPU_THREAD_MODE",
    "NCCL_P2P_DISABLE",
    "TF_FORCE_GPU_ALLOW_GROWTH",
)


@pytest.fixture
def fresh_process() -> Iterator[None]:
    """Start from, and leave behind, a process where accelkit has set nothing: the
    variables above unset, accelkit's record of its own values forgotten, and
    PyTorch's TF32 and cuDNN flags back at their defaults."""
    from accelkit.frameworks import _common

    environ = dict(os.environ)
    for name in PROCESS_VARIABLES:
        os.environ.pop(name, None)
    _common.forget()
    yield
    os.environ.clear()
    os.environ.update(environ)
    _common.forget()
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.backends.cuda.matmul.fp32_precision = "none"
        torch.backends.cudnn.benchmark = False


@pytest.fixture(autouse=True)
def _current_plan_kept() -> Iterator[None]:
    """A test that applies a plan makes it current; the next test starts from the plan
    that was current before."""
    from accelkit import configure

    before = configure.current_plan()
    yield
    configure.set_current_plan(before)


@pytest.fixture(autouse=True)
def _keras_compile_kept() -> Iterator[None]:
    """`keras.Model.compile` as it was before each test: the TensorFlow adapter guards it
    process-wide when it sets mixed_float16 (`accelkit.frameworks.keras_train_step`), and
    one test's plan must not change how the next test's models train."""
    keras = sys.modules.get("keras")
    model = getattr(keras, "Model", None)
    compile_ = getattr(model, "compile", None)
    yield
    if compile_ is not None:
        model.compile = compile_  # type: ignore[union-attr]
    elif "keras" in sys.modules:  # imported by the test itself: its original
        model = sys.modules["keras"].Model
        original = getattr(model.compile, "__wrapped__", None)
        if original is not None:
            model.compile = original
