"""Planning for GPUs the installed framework cannot use (issue 25): a PyTorch or TensorFlow
built without CUDA on a machine whose GPUs NVML sees gets a CPU plan that says why and
how to fix it, for every GPU in the datasheet and both frameworks."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelkit import specs
from accelkit.hardware import FrameworkBuild
from accelkit.hardware.what_if import what_if
from accelkit.planning import Request, plan
from accelkit.planning.keys import Kind

pytestmark = pytest.mark.reliability

FRAMEWORKS = st.sampled_from(["torch", "tensorflow"])
GPUS = st.sampled_from([s.key for s in specs.all_specs()])


def _with_builds(gpu: str, count: int, driver: str | None, *builds: FrameworkBuild):
    return dataclasses.replace(
        what_if(gpu, count), frameworks=builds, cuda_driver_version=driver, source="nvml"
    )


@given(
    gpu=GPUS,
    count=st.integers(1, 8),
    framework=FRAMEWORKS,
    driver=st.sampled_from(["12.4", "13.0", None]),
)
def test_a_build_without_cuda_gets_a_cpu_plan_that_says_why(gpu, count, framework, driver) -> None:
    build = FrameworkBuild(framework, "9.9.9", False, "CPU only")
    hardware = _with_builds(gpu, count, driver, build)
    result = plan(hardware, Request(framework=framework))
    assert result.precision.value == "fp32" and result.device_type == "cpu"
    assert result.distribution.value == "none"
    assert result.hardware.gpus == () and "built without CUDA" in result.hardware.gpus_unusable
    first = result.settings[0]
    assert first.key.value in ("precision", "keras.mixed_precision.global_policy")
    assert "built without CUDA" in first.reason and "Fix:" in first.reason
    # nothing for a GPU: no TF32, cuDNN, allocator, memory growth, NCCL variable
    cpu_alone = plan(what_if(None), Request(framework=framework))
    assert [s.key for s in result.settings] == [s.key for s in cpu_alone.settings]
    assert not any(s.kind is Kind.ENV for s in result.settings)
    assert result.notes[-1] == result.hardware.gpus_unusable


@given(gpu=GPUS, count=st.integers(1, 8), framework=FRAMEWORKS)
def test_a_cuda_build_or_an_unknown_one_changes_nothing(gpu, count, framework) -> None:
    bare = plan(what_if(gpu, count), Request(framework=framework))
    for build in (FrameworkBuild(framework, "1", True, "CUDA 12.8"), FrameworkBuild(framework)):
        hardware = dataclasses.replace(what_if(gpu, count), frameworks=(build,))
        planned = plan(hardware, Request(framework=framework))
        assert planned.settings == bare.settings and planned.hardware.gpus_unusable == ""
    other = "tensorflow" if framework == "torch" else "torch"
    cpu_other = FrameworkBuild(other, "1", False, "CPU only")
    planned = plan(
        dataclasses.replace(what_if(gpu, count), frameworks=(cpu_other,)),
        Request(framework=framework),
    )
    assert planned.settings == bare.settings  # the other framework's build is not this one's


def test_an_explicit_precision_is_kept_on_the_cpu() -> None:
    hardware = _with_builds(
        "Tesla T4", 1, "12.4", FrameworkBuild("torch", "2.6.0+cpu", False, "CPU only")
    )
    result = plan(hardware, Request(framework="torch", precision="bf16"))
    assert result.precision.value == "bf16" and result.device_type == "cpu"
    assert "cu124" in result.notes[-1]
