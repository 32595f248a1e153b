"""The `float8` rule and precision "fp8" on real PyTorch runs: never on the CPU; on a GPU
with float8 tensor cores, an untuned bf16 fit is told how to let tune try float8, and
an fp8 plan autocasts in bf16."""

from __future__ import annotations

import functools

import pytest

from accelkit.hardware import capabilities, detect
from accelkit.planning import Request, plan

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from ..helpers import torch_data
from ..helpers.torch_data import batches, mlp

train = functools.partial(torch_data.train, lr=1e-3)
WIDTHS = (256, 512, 256, 8)


def verdicts(report):
    return {a["id"]: a for a in report.advice}


def _float8_gpu() -> None:
    cc = torch.cuda.get_device_capability() if torch.cuda.is_available() else None
    if not capabilities.has_fp8(cc):
        pytest.skip(f"needs float8 tensor cores (compute capability >= 8.9); this GPU has {cc}")


def test_a_cpu_run_gets_no_float8_advice() -> None:
    report = train(mlp(*WIDTHS), batches(n=8), device="cpu")
    assert "float8" not in verdicts(report)


@pytest.mark.gpu
def test_an_untuned_bf16_run_on_float8_tensor_cores_is_told_to_let_tune_try() -> None:
    _float8_gpu()
    planned = plan(detect(), Request(framework="torch"))
    assert planned.precision.value == "bf16" and planned.value("float8") == "tried by tune"
    report = train(mlp(*WIDTHS), batches(n=16), plan=planned, device="cuda", tune=False)
    found = verdicts(report)["float8"]
    assert found["severity"] == "info" and found["speedup"] is None
    assert found["evidence"]["tune"] == "not run"
    assert found["evidence"]["linear_layers"] == 2  # 256x512 and 512x256; the head stays
    assert "tune=True" in found["action"]


@pytest.mark.gpu
def test_an_fp8_plan_autocasts_in_bf16_on_the_gpu() -> None:
    _float8_gpu()
    planned = plan(detect(), Request(framework="torch", precision="fp8"))
    model, x = torch.nn.Linear(64, 64).cuda(), torch.randn(8, 64, device="cuda")
    with planned.autocast():
        assert model(x).dtype == torch.bfloat16
    assert not planned.grad_scaler().is_enabled()
