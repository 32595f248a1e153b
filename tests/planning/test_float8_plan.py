"""Precision "fp8" and the plan's float8 row: bf16 autocast around float8 matmuls on
compute capability >= 8.9, refused elsewhere with every number; on a torch plan the
`float8` setting says whether tune tries float8, it is on, or why it is off."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelkit import plan_for
from accelkit.hardware import capabilities
from accelkit.hardware.info import GpuInfo, HardwareInfo
from accelkit.planning import Precision, Request, plan
from accelkit.planning.keys import REGISTRY, Float8, Key, Kind, Phase
from accelkit.planning.memory import per_param
from accelkit.planning.types import Framework, Optimizer, Plan


def gpus(*found: tuple[str, tuple[int, int] | None]) -> HardwareInfo:
    return HardwareInfo(
        gpus=tuple(GpuInfo(i, name, compute_capability=cc) for i, (name, cc) in enumerate(found)),
        source="snapshot",
    )


H200 = gpus(("NVIDIA H200", (9, 0)))
CPU = HardwareInfo(source="cpu")


# -- precision="fp8" -------------------------------------------------------------------


@pytest.mark.parametrize("gpu", ["NVIDIA H200", "GeForce RTX 4090", "NVIDIA L4"])
def test_fp8_is_bf16_autocast_with_float8_on(gpu: str) -> None:
    result = plan_for(gpu, precision="fp8")
    assert result.precision is Precision.FP8
    assert result.value(Key.PRECISION) == "fp8"
    assert result.value(Key.AUTOCAST_DTYPE) == "bfloat16"
    assert result.value(Key.OUTPUTS_FLOAT32) is True
    assert result.get(Key.GRAD_SCALER) is None
    assert result.value(Key.TORCH_TF32_MATMUL) is True
    assert result.value(Key.TORCH_TF32_CUDNN) is True
    assert result.value(Key.CHANNELS_LAST) is True
    assert result.value(Key.FLOAT8) == Float8.ON
    assert "every eligible linear layer" in result.get(Key.FLOAT8).reason
    assert result.mixed and result.matmul_dtype == "fp8"


def test_fp8_takes_the_memory_of_bf16() -> None:
    fp8 = plan_for("H200", count=8, precision="fp8", params=8e9).memory
    bf16 = plan_for("H200", count=8, precision="bf16", params=8e9).memory
    assert fp8 is not None and bf16 is not None
    assert dataclasses.replace(fp8, precision="bf16") == bf16
    for optimizer in Optimizer:
        assert per_param(optimizer, Precision.FP8, Framework.TORCH) == per_param(
            optimizer, Precision.BF16, Framework.TORCH
        )


@pytest.mark.parametrize(
    ("hardware", "has", "instead"),
    [
        (gpus(("NVIDIA A100-SXM4-80GB", (8, 0))), "NVIDIA A100-SXM4-80GB has 8.0", "'bf16'"),
        (gpus(("NVIDIA A10", (8, 6))), "NVIDIA A10 has 8.6", "'bf16'"),
        (gpus(("Tesla T4", (7, 5))), "Tesla T4 has 7.5", "'fp16'"),
        (gpus(("Tesla P100-PCIE-16GB", (6, 0))), "Tesla P100-PCIE-16GB has 6.0", "'fp32'"),
        # the GPU that limits the plan is named: an A100 beside an H200
        (gpus(("NVIDIA H200", (9, 0)), ("NVIDIA A100-SXM4-80GB", (8, 0))), "A100", "'bf16'"),
    ],
)
def test_fp8_below_8_9_is_refused_with_every_number(
    hardware: HardwareInfo, has: str, instead: str
) -> None:
    needs = (
        "precision='fp8' needs compute capability >= 8.9 (float8 tensor cores: Ada, Hopper, "
        "Blackwell)"
    )
    with pytest.raises(ValueError, match=re.escape(needs)) as raised:
        plan(hardware, Request(precision="fp8"))
    message = str(raised.value)
    assert has in message and f"Use {instead}" in message


def test_fp8_is_refused_without_a_gpu_and_where_the_capability_is_unknown() -> None:
    with pytest.raises(ValueError, match="no NVIDIA GPU detected"):
        plan(CPU, Request(precision="fp8"))
    with pytest.raises(ValueError, match="compute capability of Mystery GPU is unknown"):
        plan(gpus(("Mystery GPU", None)), Request(precision="fp8"))
    with pytest.raises(ValueError, match=r"needs compute capability >= 8\.9"):
        plan_for(None, precision="fp8")


def test_fp8_is_refused_for_tensorflow_naming_keras_own_float8() -> None:
    with pytest.raises(ValueError, match="is for PyTorch") as raised:
        plan(H200, Request(framework="tensorflow", precision="fp8"))
    assert "model.quantize('float8') ran no float8 matmul" in str(raised.value)
    assert "'bf16'" in str(raised.value)


def test_fp8_is_a_precision_of_the_shared_vocabulary() -> None:
    assert Precision.parse("FP8") is Precision.FP8
    assert Precision.FP8.without_float8 is Precision.BF16
    assert all(p.without_float8 is p for p in Precision if p is not Precision.FP8)
    assert Request(precision="fp8").precision is Precision.FP8


def test_plan_autocast_under_fp8_is_bf16_and_scales_nothing() -> None:
    torch = pytest.importorskip("torch")
    result = plan_for("H200", precision="fp8")
    model, x = torch.nn.Linear(8, 2), torch.randn(4, 8)
    with result.autocast("cpu"):
        assert model(x).dtype == torch.bfloat16
    assert not result.grad_scaler().is_enabled()


# -- the float8 row ----------------------------------------------------------------------


@pytest.mark.parametrize("precision", ["auto", "bf16"])
def test_float8_is_tried_by_tune_on_8_9_and_later(precision: str) -> None:
    for gpu, cc in (("H200", "9.0"), ("RTX 4090", "8.9")):
        setting = plan_for(gpu, precision=precision).get(Key.FLOAT8)
        assert setting is not None and setting.value == Float8.TRIED == "tried by tune"
        assert f"compute capability {cc}" in setting.reason
        assert "tune tries float8 matmuls (torchao)" in setting.reason
        assert "checked against the bf16 step" in setting.reason
        assert "small layers run slower in float8" in setting.reason


@pytest.mark.parametrize(
    ("gpu", "cc"), [("A100-SXM4-80GB", "8.0"), ("A10", "8.6"), ("Tesla T4", "7.5")]
)
def test_float8_is_off_below_8_9_and_says_why(gpu: str, cc: str) -> None:
    setting = plan_for(gpu).get(Key.FLOAT8)
    assert setting is not None and setting.value == Float8.OFF
    assert f"(compute capability {cc})" in setting.reason
    assert "compute capability >= 8.9 (float8 tensor cores: Ada, Hopper, Blackwell)" in (
        setting.reason
    )


@pytest.mark.parametrize("precision", ["fp16", "tf32", "fp32"])
def test_float8_is_off_under_a_precision_without_bf16(precision: str) -> None:
    setting = plan_for("H200", precision=precision).get(Key.FLOAT8)
    assert setting is not None and setting.value == Float8.OFF
    assert f"precision={precision!r}" in setting.reason and "bf16" in setting.reason


def test_no_float8_row_on_the_cpu_for_tensorflow_or_an_unknown_gpu() -> None:
    assert plan_for(None).get(Key.FLOAT8) is None
    assert plan_for("H200", framework="tensorflow").get(Key.FLOAT8) is None
    assert plan(gpus(("Mystery GPU", None))).get(Key.FLOAT8) is None


def test_the_float8_key_is_read_by_tune_and_round_trips() -> None:
    entry = REGISTRY[Key.FLOAT8]
    assert (entry.kind, entry.framework, entry.phase) == (Kind.HELPER, "torch", Phase.FIT)
    assert "tune" in entry.applied_by
    for result in (plan_for("H200"), plan_for("A100"), plan_for("H200", precision="fp8")):
        loaded = Plan.from_dict(json.loads(json.dumps(result.to_dict())))
        assert loaded.value(Key.FLOAT8) == result.value(Key.FLOAT8)
        assert loaded.to_dict() == result.to_dict()
        assert str(result.value(Key.FLOAT8)) in str(result)  # the table shows the value


CAPABILITIES = st.tuples(st.integers(3, 12), st.integers(0, 9))


@given(cc=CAPABILITIES, precision=st.sampled_from(["auto", "bf16", "fp16", "fp32", "tf32"]))
def test_float8_is_tried_exactly_where_the_gpu_has_it_under_bf16(
    cc: tuple[int, int], precision: str
) -> None:
    hardware = gpus(("Some GPU", cc))
    try:
        result = plan(hardware, Request(precision=precision))
    except ValueError:  # bf16/tf32 asked below 8.0
        assert precision in ("bf16", "tf32") and not capabilities.has_bf16(cc)
        return
    value = result.value(Key.FLOAT8)
    tried = capabilities.has_fp8(cc) and result.precision is Precision.BF16
    assert (value == Float8.TRIED) is tried
    assert value in (Float8.TRIED, Float8.OFF)


@given(cc=CAPABILITIES)
def test_fp8_is_planned_exactly_where_the_gpu_has_float8(cc: tuple[int, int]) -> None:
    if not capabilities.has_fp8(cc):
        with pytest.raises(ValueError, match=re.escape(f"has {cc[0]}.{cc[1]}. Use")):
            plan(gpus(("Some GPU", cc)), Request(precision="fp8"))
        return
    result = plan(gpus(("Some GPU", cc)), Request(precision="fp8"))
    assert result.value(Key.FLOAT8) == Float8.ON
