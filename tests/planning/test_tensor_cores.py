"""GTX 16 cards report compute capability 7.5 like the RTX 20 series but have no tensor
cores: the planner judges every GPU by its name too (issue 13, item 22)."""

from __future__ import annotations

import pytest

from accelkit.hardware.info import GpuInfo, HardwareInfo
from accelkit.hardware.what_if import what_if
from accelkit.planning import Framework, Precision, Request, plan
from accelkit.planning.keys import Key


def _snapshot(*names: str, cc: tuple[int, int] = (7, 5)) -> HardwareInfo:
    gpus = tuple(
        GpuInfo(index=i, name=name, compute_capability=cc, memory_bytes=6 * 10**9)
        for i, name in enumerate(names)
    )
    return HardwareInfo(gpus=gpus, source="snapshot")


def _keys(p) -> set:
    return {s.key for s in p.settings}


@pytest.mark.parametrize(
    "name",
    [
        "NVIDIA GeForce GTX 1660",
        "NVIDIA GeForce GTX 1660 SUPER",
        "NVIDIA GeForce GTX 1660 Ti",
        "NVIDIA GeForce GTX 1650",
    ],
)
@pytest.mark.parametrize("framework", [Framework.TORCH, Framework.TENSORFLOW])
def test_a_gtx_16_card_plans_fp32_with_the_reason(name, framework):
    p = plan(_snapshot(name), Request(framework=framework))
    assert p.precision is Precision.FP32
    reason = next(s.reason for s in p.settings if s.key in (Key.PRECISION, Key.KERAS_POLICY))
    assert name in reason and "no tensor cores" in reason
    assert not _keys(p) & {
        Key.GRAD_SCALER,
        Key.AUTOCAST_DTYPE,
        Key.CHANNELS_LAST,
        Key.KERAS_LOSS_SCALE,
    }


def test_an_rtx_20_card_of_the_same_capability_still_plans_fp16():
    p = plan(_snapshot("NVIDIA GeForce RTX 2060"), Request())
    assert p.precision is Precision.FP16
    assert Key.GRAD_SCALER in _keys(p)


def test_every_gpu_must_have_tensor_cores():
    p = plan(_snapshot("NVIDIA GeForce RTX 2080", "NVIDIA GeForce GTX 1660 Ti"), Request())
    assert p.precision is Precision.FP32
    reason = next(s.reason for s in p.settings if s.key is Key.PRECISION)
    assert reason.startswith("NVIDIA GeForce GTX 1660 Ti (compute capability 7.5)")
    assert Key.CHANNELS_LAST not in _keys(p)


def test_a_gpu_of_unknown_capability_does_not_decide():
    gpus = (
        GpuInfo(index=0, name="NVIDIA GeForce RTX 2080", compute_capability=(7, 5)),
        GpuInfo(index=1, name="NVIDIA GeForce RTX 2080"),
    )
    assert plan(HardwareInfo(gpus=gpus, source="snapshot"), Request()).precision is Precision.FP16


@pytest.mark.parametrize(
    ("gpu", "precision"),
    [
        ("NVIDIA GeForce GTX 1660 SUPER", Precision.FP32),
        ("NVIDIA GeForce GTX 1080 Ti", Precision.FP32),
        ("NVIDIA TITAN V", Precision.FP16),
    ],
)
def test_what_if_plans_for_the_new_rows(gpu, precision):
    assert plan(what_if(gpu, count=2), Request()).precision is precision


def test_a_what_if_of_a_gpu_without_published_peaks_plans_and_says_so():
    hardware = what_if("NVIDIA H800", count=8)
    assert plan(hardware, Request()).precision is Precision.BF16
    assert "peaks are unknown" in hardware.notes[0]
    assert hardware.gpus[0].memory_bytes == 80 * 10**9


def test_a_what_if_of_a_gpu_of_unknown_memory_and_power_plans(monkeypatch):
    import dataclasses

    from accelkit import specs
    from accelkit.hardware import what_if as module

    named_only = dataclasses.replace(specs.by_key("h800-sxm"), memory_gb=None, tdp_w=None)
    monkeypatch.setattr(module.specs, "lookup", lambda name: named_only)
    hardware = what_if("anything", count=2)
    assert hardware.gpus[0].memory_bytes is None and hardware.gpus[0].power_limit_w is None
    assert plan(hardware, Request()).precision is Precision.BF16
