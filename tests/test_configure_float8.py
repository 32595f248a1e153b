"""auto_configure(precision="fp8") and ACCELKIT_PRECISION=fp8: refused where they cannot
be honoured (a GPU below 8.9, torchao missing: its install command), planned as bf16
autocast with float8 on where they can."""

from __future__ import annotations

import importlib.util
import re
import sys

import pytest

import accelkit
from accelkit.hardware.info import GpuInfo, HardwareInfo
from accelkit.planning import Precision
from accelkit.planning.keys import Float8, Key

H200 = HardwareInfo(gpus=(GpuInfo(0, "NVIDIA H200", compute_capability=(9, 0)),), source="snapshot")
A100 = HardwareInfo(
    gpus=(GpuInfo(0, "NVIDIA A100-SXM4-80GB", compute_capability=(8, 0)),), source="snapshot"
)
INSTALL = "pip install 'accelkit[fp8]'"


@pytest.fixture(autouse=True)
def clean_state(fresh_process: None) -> None:
    """Every test here starts from, and leaves, a fresh process state."""


@pytest.fixture
def no_torchao(monkeypatch: pytest.MonkeyPatch) -> None:
    """torchao absent, as `import torchao` would find it: blocked in sys.modules."""
    monkeypatch.setitem(sys.modules, "torchao", None)


def configure(**kwargs: object) -> accelkit.Plan:
    return accelkit.auto_configure(framework="torch", dry_run=True, verbose=False, **kwargs)


@pytest.mark.torch
def test_fp8_without_torchao_is_refused_with_the_install_command(no_torchao: None) -> None:
    with pytest.raises(ValueError, match=re.escape(INSTALL)) as raised:
        configure(hardware=H200, precision="fp8")
    assert "torchao" in str(raised.value)


@pytest.mark.torch
def test_the_environment_variable_is_refused_the_same_way(
    no_torchao: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACCELKIT_PRECISION", "fp8")
    with pytest.raises(ValueError, match=r"accelkit\[fp8\]"):
        configure(hardware=H200)


@pytest.mark.torch
def test_torchao_found_by_find_spec_alone_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torchao", raising=False)
    found = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torchao" else found(name, *a)
    )
    with pytest.raises(ValueError, match="torchao"):
        configure(hardware=H200, precision="fp8")


@pytest.mark.torch
def test_fp8_with_torchao_plans_bf16_autocast_and_float8_on(monkeypatch) -> None:
    if importlib.util.find_spec("torchao") is None:
        pytest.skip("torchao is not installed")
    monkeypatch.setenv("ACCELKIT_PRECISION", "fp8")
    plan = configure(hardware=H200)
    assert plan.precision is Precision.FP8
    assert plan.value(Key.AUTOCAST_DTYPE) == "bfloat16"
    assert plan.value(Key.FLOAT8) == Float8.ON
    assert any("ACCELKIT_PRECISION='fp8'" in note for note in plan.notes)


@pytest.mark.torch
def test_fp8_on_an_a100_is_refused_before_torchao_matters(monkeypatch) -> None:
    monkeypatch.setenv("ACCELKIT_PRECISION", "fp8")
    with pytest.raises(ValueError, match=r"NVIDIA A100-SXM4-80GB has 8\.0"):
        configure(hardware=A100)


@pytest.mark.torch
def test_other_precisions_never_ask_for_torchao(no_torchao: None) -> None:
    plan = configure(hardware=H200)
    assert plan.precision is Precision.BF16 and plan.value(Key.FLOAT8) == Float8.TRIED
