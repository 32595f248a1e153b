"""Issue 13 item 6: a script that asked PyTorch for determinism keeps it; so does one that
asks accelkit (``deterministic=True``). Real torch flags on the CPU build: cuDNN's
benchmark flag is settable without a GPU, so an A100 plan exercises the adapter."""

from __future__ import annotations

import pytest

import accelkit
from accelkit.hardware.info import GpuInfo, HardwareInfo
from accelkit.planning import Request, Status, plan
from accelkit.planning.keys import Key

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

A100 = HardwareInfo(
    gpus=(GpuInfo(0, "NVIDIA A100-SXM4-80GB", compute_capability=(8, 0)),), source="snapshot"
)


@pytest.fixture(autouse=True)
def determinism_flags():
    """Start with PyTorch's defaults and leave them behind."""
    torch.use_deterministic_algorithms(False)
    torch.backends.cudnn.deterministic = False
    torch.backends.cudnn.benchmark = False
    yield
    torch.use_deterministic_algorithms(False)
    torch.backends.cudnn.deterministic = False
    torch.backends.cudnn.benchmark = False


def benchmark(result: accelkit.Plan):
    return result.get(Key.CUDNN_BENCHMARK)


@pytest.mark.parametrize(
    ("ask", "named"),
    [
        (lambda: torch.use_deterministic_algorithms(True), "use_deterministic_algorithms"),
        (lambda: setattr(torch.backends.cudnn, "deterministic", True), "cudnn.deterministic"),
    ],
)
def test_the_scripts_determinism_keeps_cudnn_benchmark_off(ask, named) -> None:
    ask()
    result = accelkit.auto_configure(framework="torch", hardware=A100, verbose=False)
    assert torch.backends.cudnn.benchmark is False
    setting = benchmark(result)
    assert setting.status is Status.KEPT_USER_VALUE and named in setting.detail


def test_deterministic_request_plans_benchmark_off() -> None:
    result = accelkit.auto_configure(
        framework="torch", hardware=A100, verbose=False, deterministic=True
    )
    setting = benchmark(result)
    assert setting.value is False and "deterministic=True" in setting.reason
    assert setting.status is Status.ALREADY_SET and torch.backends.cudnn.benchmark is False


def test_deterministic_request_undoes_accelkits_own_benchmark() -> None:
    accelkit.apply(plan(A100, Request()))
    assert torch.backends.cudnn.benchmark is True
    result = accelkit.apply(plan(A100, Request(deterministic=True)))
    assert benchmark(result).status is Status.APPLIED
    assert torch.backends.cudnn.benchmark is False


def test_the_users_own_benchmark_is_kept_against_a_deterministic_plan() -> None:
    torch.backends.cudnn.benchmark = True
    result = accelkit.apply(plan(A100, Request(deterministic=True)))
    setting = benchmark(result)
    assert setting.status is Status.KEPT_USER_VALUE and "set by the user" in setting.detail
    assert torch.backends.cudnn.benchmark is True


def test_without_determinism_benchmark_is_applied_as_before() -> None:
    result = accelkit.auto_configure(framework="torch", hardware=A100, verbose=False)
    assert benchmark(result).status is Status.APPLIED and torch.backends.cudnn.benchmark


def test_plan_for_takes_deterministic() -> None:
    assert (
        accelkit.plan_for("A100-SXM4-80GB", deterministic=True).value(Key.CUDNN_BENCHMARK) is False
    )
