"""The matmul rate measured on the device at hand."""

from __future__ import annotations

import math

import pytest

from accelkit.profiling.calibrate import DTYPES, matmul_tflops, matmul_tflops_tensorflow


def _matmul_precision_flags(torch):
    """Everything `matmul_tflops` may touch, read without tripping the legacy getter."""
    backends = torch.backends
    flags = {
        name: getattr(flag, "fp32_precision", None)
        for name, flag in (("cuda", backends.cuda.matmul), ("mkldnn", backends.mkldnn.matmul))
    }
    try:
        flags["legacy"] = (torch.get_float32_matmul_precision(), backends.cuda.matmul.allow_tf32)
    except RuntimeError as error:  # mixed per-backend flags make the legacy getters raise
        flags["legacy"] = str(error)
    return flags


@pytest.mark.torch
def test_cpu_fp32_rate_is_positive_with_its_spread():
    cal = matmul_tflops("fp32", device="cpu")

    assert cal.device == "cpu" and cal.dtype == "fp32" and cal.size == 1024
    assert math.isfinite(cal.tflops) and cal.tflops > 0
    low, high = cal.spread
    assert low <= cal.tflops <= high
    assert "median of 10" in cal.method and "1024x1024x1024" in cal.method


@pytest.mark.torch
def test_cpu_half_precision_uses_a_smaller_default_size():
    cal = matmul_tflops("bf16", device="cpu", repeats=2, warmup=1)

    assert cal.size == 256 and cal.tflops > 0


@pytest.mark.parametrize("bad", ["float32", "int8", "BF16", ""])
def test_a_bad_dtype_raises_naming_the_valid_ones(bad):
    with pytest.raises(ValueError, match="is not valid; choose one of") as raised:
        matmul_tflops(bad)
    for valid in DTYPES:
        assert repr(valid) in str(raised.value)


@pytest.mark.torch
def test_bad_device_and_counts_raise():
    with pytest.raises(ValueError, match="device='nonsense'"):
        matmul_tflops(device="nonsense")
    with pytest.raises(ValueError, match="repeats=0"):
        matmul_tflops(repeats=0)


@pytest.mark.torch
@pytest.mark.parametrize("dtype", ["tf32", "fp32"])
@pytest.mark.parametrize("user_setting", [None, "high", "highest"])
def test_matmul_precision_flags_are_restored(dtype, user_setting):
    torch = pytest.importorskip("torch")
    before_test = _matmul_precision_flags(torch)
    try:
        if user_setting:
            torch.set_float32_matmul_precision(user_setting)
        before = _matmul_precision_flags(torch)

        matmul_tflops(dtype, device="cpu", size=64, repeats=2, warmup=1)

        assert _matmul_precision_flags(torch) == before
    finally:
        for name in ("cuda", "mkldnn"):
            flag = getattr(torch.backends, name).matmul
            if before_test[name] is not None:
                flag.fp32_precision = before_test[name]
        if before_test["cuda"] is None:
            torch.set_float32_matmul_precision(before_test["legacy"][0])


@pytest.mark.tensorflow
def test_tensorflow_cpu_rate_and_tf32_flag_restored():
    tf = pytest.importorskip("tensorflow")
    before = tf.config.experimental.tensor_float_32_execution_enabled()

    cal = matmul_tflops_tensorflow("fp32", device="/CPU:0", size=256, repeats=3, warmup=1)

    assert cal.device == "cpu:0" and cal.tflops > 0
    assert cal.spread[0] <= cal.tflops <= cal.spread[1]
    assert tf.config.experimental.tensor_float_32_execution_enabled() == before


@pytest.mark.gpu
def test_bf16_beats_fp32_on_cuda():
    fp32 = matmul_tflops("fp32", device="cuda")
    bf16 = matmul_tflops("bf16", device="cuda")

    assert fp32.device.startswith("cuda:") and fp32.size == 8192
    assert bf16.tflops > 1.5 * fp32.tflops, (fp32, bf16)
