"""Issue 13 item 6: a deterministic request plans no kernel choice by timing."""

from __future__ import annotations

import pytest

from accelkit.hardware.info import GpuInfo, HardwareInfo
from accelkit.planning import Request, plan
from accelkit.planning.keys import Key

A100 = HardwareInfo(
    gpus=(GpuInfo(0, "NVIDIA A100-SXM4-80GB", compute_capability=(8, 0)),), source="snapshot"
)


def test_deterministic_plans_cudnn_benchmark_off_with_its_reason() -> None:
    setting = plan(A100, Request(deterministic=True)).get(Key.CUDNN_BENCHMARK)
    assert setting.value is False
    assert "reproducibility" in setting.reason and "use_deterministic_algorithms" in setting.reason


def test_deterministic_wins_over_fixed_shapes_and_keeps_the_rest() -> None:
    fast = plan(A100, Request())
    exact = plan(A100, Request(deterministic=True, fixed_shapes=True))
    assert fast.value(Key.CUDNN_BENCHMARK) is True
    assert exact.precision is fast.precision  # bf16 autocast is deterministic
    assert {s.key for s in exact.settings} == {s.key for s in fast.settings}


def test_deterministic_changes_nothing_without_a_gpu() -> None:
    cpu = HardwareInfo(source="snapshot")
    assert plan(cpu, Request(deterministic=True)).settings == plan(cpu, Request()).settings


@pytest.mark.parametrize("name", ["deterministic", "fixed_shapes", "compile"])
def test_request_flags_must_be_booleans(name) -> None:
    with pytest.raises(ValueError, match=f"{name}='yes' is not valid; use True or False"):
        Request(**{name: "yes"})
