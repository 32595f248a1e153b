"""Applying plans to a real PyTorch (CPU build): flags read back, user values survive."""

from __future__ import annotations

import os

import pytest

import accelkit
from accelkit.hardware.info import GpuInfo, HardwareInfo
from accelkit.planning import Precision, Request, Status, plan

pytestmark = pytest.mark.torch

A100 = HardwareInfo(
    gpus=(GpuInfo(0, "NVIDIA A100-SXM4-80GB", compute_capability=(8, 0)),), source="snapshot"
)
T4 = HardwareInfo(gpus=(GpuInfo(0, "Tesla T4", compute_capability=(7, 5)),), source="snapshot")


@pytest.fixture(autouse=True)
def torch_flags():
    """Restore the flags the adapter touches (through the API torch >= 2.9 wants)."""
    import torch

    saved = (torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark)
    # Start from PyTorch's defaults whatever earlier tests in this process set.
    torch.backends.cuda.matmul.fp32_precision = "none"
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = False
    yield torch
    # Back to "untouched" as torch >= 2.9 reports it: the matmul flag "none".
    torch.backends.cuda.matmul.fp32_precision = "none"
    torch.backends.cudnn.allow_tf32 = saved[0]
    torch.backends.cudnn.benchmark = saved[1]


def statuses(result: accelkit.Plan) -> dict[str, Status]:
    return {s.key: s.status for s in result.settings}


def test_a100_plan_sets_tf32_and_cudnn_flags(torch_flags) -> None:
    torch = torch_flags
    result = accelkit.apply(plan(A100, Request(framework="torch")))
    assert torch.backends.cuda.matmul.fp32_precision == "tf32"
    # Set through the legacy API, so the legacy getters Lightning calls still work.
    assert torch.get_float32_matmul_precision() == "high"
    assert torch.backends.cuda.matmul.allow_tf32 is True
    assert torch.backends.cudnn.benchmark is True
    status = statuses(result)
    assert status["torch.backends.cuda.matmul.allow_tf32"] is Status.APPLIED
    assert status["torch.backends.cudnn.benchmark"] is Status.APPLIED
    if torch.cuda.is_initialized():  # on a GPU host an earlier test may have started CUDA
        assert status["PYTORCH_CUDA_ALLOC_CONF"] is Status.FAILED
    else:
        assert status["PYTORCH_CUDA_ALLOC_CONF"] is Status.APPLIED
        assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert status["precision"] is Status.DEFERRED


def test_applying_twice_changes_nothing_the_second_time(torch_flags) -> None:
    first = accelkit.apply(plan(A100, Request()))
    second = accelkit.apply(plan(A100, Request()))
    assert Status.APPLIED in statuses(first).values()
    assert Status.APPLIED not in statuses(second).values()
    assert statuses(second)["torch.backends.cuda.matmul.allow_tf32"] is Status.ALREADY_SET


def test_a_later_fp32_plan_may_undo_accelkits_own_tf32(torch_flags) -> None:
    torch = torch_flags
    accelkit.apply(plan(A100, Request()))
    result = accelkit.apply(plan(A100, Request(precision="fp32")))
    assert torch.backends.cuda.matmul.fp32_precision == "ieee"
    assert torch.backends.cudnn.allow_tf32 is False
    assert statuses(result)["torch.backends.cuda.matmul.allow_tf32"] is Status.APPLIED


def test_user_set_values_survive(torch_flags) -> None:
    torch = torch_flags
    torch.set_float32_matmul_precision("highest")
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "max_split_size_mb:128"
    result = accelkit.apply(plan(A100, Request()))
    assert torch.backends.cuda.matmul.fp32_precision == "ieee"
    assert os.environ["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:128"
    status = statuses(result)
    assert status["torch.backends.cuda.matmul.allow_tf32"] is Status.KEPT_USER_VALUE
    assert status["PYTORCH_CUDA_ALLOC_CONF"] is Status.KEPT_USER_VALUE
    assert "max_split_size_mb:128" in result.get("PYTORCH_CUDA_ALLOC_CONF").detail


def test_user_set_new_fp32_precision_api_is_kept(torch_flags) -> None:
    torch = torch_flags
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    result = accelkit.apply(plan(A100, Request()))
    assert torch.backends.cuda.matmul.fp32_precision == "ieee"
    assert result.get("torch.backends.cuda.matmul.allow_tf32").status is Status.KEPT_USER_VALUE


def test_user_value_under_the_new_allocator_variable_is_kept(torch_flags) -> None:
    os.environ["PYTORCH_ALLOC_CONF"] = "expandable_segments:False"
    result = accelkit.apply(plan(A100, Request()))
    assert "PYTORCH_CUDA_ALLOC_CONF" not in os.environ
    assert result.get("PYTORCH_CUDA_ALLOC_CONF").status is Status.KEPT_USER_VALUE


def test_allocator_after_cuda_initialised_says_too_late(torch_flags, monkeypatch) -> None:
    torch = torch_flags
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    result = accelkit.apply(plan(A100, Request()))
    setting = result.get("PYTORCH_CUDA_ALLOC_CONF")
    assert setting.status is Status.FAILED and "already initialised" in setting.detail
    assert "PYTORCH_CUDA_ALLOC_CONF" not in os.environ
    # The rest of the plan still applied.
    assert result.get("torch.backends.cudnn.benchmark").status is Status.APPLIED


def test_bf16_autocast_runs_matmuls_in_bf16(torch_flags) -> None:
    torch = torch_flags
    bf16 = plan(A100, Request())
    x = torch.randn(4, 8)
    layer = torch.nn.Linear(8, 3)
    with bf16.autocast("cpu"):
        assert layer(x).dtype == torch.bfloat16
    assert layer(x).dtype == torch.float32
    assert not bf16.grad_scaler().is_enabled()


def test_fp32_and_tf32_plans_autocast_does_nothing(torch_flags) -> None:
    torch = torch_flags
    for precision in ("fp32", "tf32"):
        result = plan(A100, Request(precision=precision))
        with result.autocast("cpu"):
            assert torch.nn.Linear(4, 2)(torch.randn(2, 4)).dtype == torch.float32


def test_fp16_plan_scaler_is_enabled(torch_flags) -> None:
    result = plan(T4, Request())
    assert result.precision is Precision.FP16
    assert result.grad_scaler().is_enabled()


def test_set_device_on_the_local_rank(torch_flags) -> None:
    from accelkit.frameworks.torch_adapter import apply_device
    from accelkit.hardware.info import LauncherEnv

    two_ranks = HardwareInfo(
        gpus=A100.gpus, launcher=LauncherEnv(rank=0, local_rank=0, world_size=2, local_world_size=2)
    )
    setting = plan(two_ranks, Request()).get("torch.cuda.set_device")
    status, detail = apply_device(setting)
    if torch_flags.cuda.is_available():
        assert status is Status.APPLIED and torch_flags.cuda.current_device() == 0
    else:
        assert status is Status.NOT_APPLICABLE and "CUDA" in detail
