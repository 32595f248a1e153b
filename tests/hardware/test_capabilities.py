"""What each GPU generation can do, and how the frameworks name and switch it."""

from __future__ import annotations

import pytest

from accelkit.hardware import capabilities as caps
from accelkit.planning import Precision

GENERATIONS = [  # (compute capability, tensor cores, bf16 and tf32, fp8)
    ((6, 0), False, False, False),  # P100
    ((7, 0), True, False, False),  # V100
    ((7, 5), True, False, False),  # T4
    ((8, 0), True, True, False),  # A100
    ((8, 6), True, True, False),  # A10
    ((8, 9), True, True, True),  # L4, RTX 4090
    ((9, 0), True, True, True),  # H100, H200
    ((10, 0), True, True, True),  # B200
    (None, False, False, False),  # unknown
]


@pytest.mark.parametrize(("cc", "tensor_cores", "bf16", "fp8"), GENERATIONS)
def test_tensor_core_dtypes_by_generation(cc, tensor_cores, bf16, fp8) -> None:
    assert caps.has_tensor_cores(cc) is tensor_cores
    assert caps.has_bf16(cc) is bf16 and caps.has_tf32(cc) is bf16
    assert caps.has_fp8(cc) is fp8


@pytest.mark.parametrize(
    ("precision", "tf32", "dtype"),
    [
        ("bf16", False, "bf16"),
        ("fp16", True, "fp16"),
        ("tf32", False, "tf32"),
        ("fp32", True, "tf32"),
        ("fp32", False, "fp32"),
        (Precision.BF16, False, "bf16"),
    ],
)
def test_the_matmul_dtype_of_a_run(precision, tf32, dtype) -> None:
    assert caps.matmul_dtype(precision, tf32) == dtype


@pytest.mark.parametrize(
    ("precision", "torch_name", "policy"),
    [
        (Precision.BF16, "bfloat16", "mixed_bfloat16"),
        (Precision.FP16, "float16", "mixed_float16"),
        (Precision.TF32, None, "float32"),
        (Precision.FP32, None, "float32"),
    ],
)
def test_names_per_framework_round_trip(precision, torch_name, policy) -> None:
    assert caps.torch_dtype_name(precision) == torch_name
    assert caps.keras_policy(precision) == policy
    assert caps.is_mixed(precision) is (torch_name is not None)
    if torch_name:
        assert caps.precision_of_policy(policy) == precision.value


def test_torch_tf32_is_switched_and_restored_on_the_installed_pytorch() -> None:
    torch = pytest.importorskip("torch")
    tf32 = caps.TorchTF32(torch)
    before = tf32.matmul_precision()
    try:
        with tf32.forced(True):
            assert tf32.enabled()
        assert tf32.matmul_precision() == before
        tf32.set(True)
        assert tf32.enabled() and tf32.matmul_precision()[0] == tf32.wanted(True)
        tf32.set(False)
        assert not tf32.enabled() and tf32.matmul_precision()[0] == tf32.wanted(False)
    finally:
        torch.set_float32_matmul_precision("highest")
        if tf32.new_api:
            torch.backends.cuda.matmul.fp32_precision = "none"


def test_the_datasheet_table_agrees_with_the_generations() -> None:
    from accelkit import specs

    for spec in specs.all_specs():
        assert caps.architecture_for(spec.compute_capability) == spec.architecture, spec.key
        # A datasheet bf16 or fp8 peak only where the generation has those tensor cores.
        assert (spec.peak("bf16") is not None) <= caps.has_bf16(spec.compute_capability), spec.key
        assert (spec.peak("fp8") is not None) <= caps.has_fp8(spec.compute_capability), spec.key


@pytest.mark.parametrize(
    ("name", "tensor_cores"),
    [
        ("NVIDIA GeForce GTX 1660 Ti", False),
        ("NVIDIA GeForce GTX 1660 SUPER", False),
        ("NVIDIA GeForce GTX 1650", False),
        ("GeForce GTX 1630", False),
        ("NVIDIA GeForce RTX 2060", True),
        ("Tesla T4", True),
        (None, True),
    ],
)
def test_gtx_16_at_7_5_has_no_tensor_cores(name, tensor_cores) -> None:
    """Issue 13, item 22: a GTX 16 reports 7.5 like the RTX 20 series; by compute
    capability alone it would get fp16 mixed precision on tensor cores it lacks."""
    assert caps.has_tensor_cores((7, 5), name) is tensor_cores
    assert caps.has_tensor_cores((6, 1), "NVIDIA GeForce GTX 1080 Ti") is False


def test_the_precision_rule_gives_a_gtx_16_no_tensor_core_advice() -> None:
    from accelkit.advisor import advise
    from accelkit.hardware.info import GpuInfo, HardwareInfo

    gpu = GpuInfo(0, "NVIDIA GeForce GTX 1660 SUPER", compute_capability=(7, 5))
    hardware = HardwareInfo(gpus=(gpu,), source="snapshot")
    m = {"device": "cuda:0", "hardware": hardware.to_dict(), "matmul_dtype": "fp32"}
    assert "precision" not in [a.id for a in advise(hardware, None, m)]


def test_all_have_tensor_cores_judges_every_gpu_of_known_capability() -> None:
    from accelkit.hardware.info import GpuInfo

    rtx = GpuInfo(0, "NVIDIA GeForce RTX 2080", compute_capability=(7, 5))
    gtx = GpuInfo(1, "NVIDIA GeForce GTX 1660", compute_capability=(7, 5))
    unknown = GpuInfo(2, "NVIDIA GeForce RTX 2080")
    assert caps.all_have_tensor_cores([rtx]) is True
    assert caps.all_have_tensor_cores([rtx, gtx]) is False
    assert caps.all_have_tensor_cores([rtx, unknown]) is True
    assert caps.all_have_tensor_cores([unknown]) is False
    assert caps.all_have_tensor_cores([]) is False
