"""Measure the matmul rate the device at hand actually reaches, per dtype.

A datasheet peak is what the chip could do at its boost clock with perfect
kernels; a large square matmul is about the best real code gets, so its rate is
the honest ceiling to judge a training run against (and a check that a GPU is
not throttled, mis-clocked or sliced). FLOPs per matmul of n x n by n x n: 2·n³
(one multiply-add = 2 FLOPs).
"""

from __future__ import annotations

import contextlib
import logging
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from accelkit.hardware import capabilities
from accelkit.hardware.capabilities import TorchTF32

DTYPES = ("fp32", "tf32", "bf16", "fp16")

_log = logging.getLogger("accelkit")

_GPU_SIZE = 8192
_CPU_SIZE = 1024
_CPU_HALF_SIZE = 256  # without bf16/fp16 matmul units a CPU runs these ~50x slower than fp32
_MIN_TIMING_S = 0.005  # group back-to-back matmuls until one timing lasts this long


@dataclass(frozen=True)
class Calibration:
    """The matmul rate measured on one device in one dtype.

    Attributes:
        dtype: "fp32", "tf32", "bf16" or "fp16".
        device: what ran it, e.g. "cuda:0 NVIDIA H200" or "cpu".
        tflops: median rate over the timed repeats, in TFLOP/s.
        spread: (slowest, fastest) repeat, in TFLOP/s.
        size: n of the n x n x n matmuls.
        method: how it was measured, in words.
    """

    dtype: str
    device: str
    tflops: float
    spread: tuple[float, float]
    size: int
    method: str


def matmul_tflops(
    dtype: str = "fp32",
    *,
    device: str | None = None,
    size: int | None = None,
    repeats: int = 10,
    warmup: int = 3,
) -> Calibration:
    """Time square matmuls with PyTorch and return the achieved TFLOP/s.

    For "fp32" TF32 is switched off and for "tf32" on, only while measuring:
    PyTorch's matmul precision flags are put back as they were.

    Args:
        dtype: one of "fp32", "tf32" (fp32 tensors, TF32 tensor cores allowed),
            "bf16", "fp16".
        device: "cuda", "cuda:1", "cpu"...; default the current CUDA device if
            there is one, else the CPU.
        size: n of the n x n x n matmuls; default 8192 on a GPU, 1024 on a CPU
            (256 for bf16/fp16 there), so a CPU run takes about a second.
        repeats: timings taken; the median is reported. Each timing groups
            enough back-to-back matmuls to last at least 5 ms.
        warmup: untimed matmuls first (kernel selection, clocks ramping up).

    Returns:
        A `Calibration`.

    Raises:
        ValueError: a dtype, device, size, repeats or warmup that is not valid.

    Example:
        >>> cal = matmul_tflops("bf16")
        >>> print(f"{cal.tflops:.0f} TFLOP/s on {cal.device}")  # doctest: +SKIP
        755 TFLOP/s on cuda:0
    """
    _check(dtype, size, repeats, warmup)
    import torch

    target = _torch_device(torch, device)
    n = size or _default_size(dtype, on_cpu=target.type == "cpu")
    half = capabilities.torch_dtype_name(dtype)
    torch_dtype = getattr(torch, half) if half else torch.float32
    a = torch.randn(n, n, device=target, dtype=torch_dtype)
    b = torch.randn(n, n, device=target, dtype=torch_dtype)
    out = torch.empty(n, n, device=target, dtype=torch_dtype)

    def sync() -> None:
        if target.type == "cuda":
            torch.cuda.synchronize(target)
        elif target.type != "cpu" and hasattr(getattr(torch, target.type, None), "synchronize"):
            getattr(torch, target.type).synchronize()

    def run(count: int) -> None:
        for _ in range(count):
            torch.matmul(a, b, out=out)

    with _tf32_for(torch, dtype), torch.no_grad():
        seconds, group = _time(run, sync, repeats, warmup)
    name = _torch_device_name(torch, target)
    return _calibration(dtype, name, n, seconds, group, warmup, "torch.matmul")


def matmul_tflops_tensorflow(
    dtype: str = "fp32",
    *,
    device: str | None = None,
    size: int | None = None,
    repeats: int = 10,
    warmup: int = 3,
) -> Calibration:
    """`matmul_tflops` measured with TensorFlow's `tf.linalg.matmul`.

    TensorFlow allows TF32 by default; it is switched off for "fp32", on for
    "tf32", and put back afterwards.

    Args:
        dtype: one of "fp32", "tf32", "bf16", "fp16".
        device: a TensorFlow device such as "/GPU:0" or "/CPU:0"; default the
            first GPU if there is one, else the CPU.
        size, repeats, warmup: as in `matmul_tflops`.

    Example:
        >>> matmul_tflops_tensorflow("fp16").tflops  # doctest: +SKIP
        88.1
    """
    _check(dtype, size, repeats, warmup)
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    name = device or ("/GPU:0" if gpus else "/CPU:0")
    on_cpu = "CPU" in name.upper()
    n = size or _default_size(dtype, on_cpu=on_cpu)
    half = capabilities.torch_dtype_name(dtype)
    tf_dtype = getattr(tf, half) if half else tf.float32
    saved_tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
    tf.config.experimental.enable_tensor_float_32_execution(dtype == "tf32")
    try:
        with tf.device(name):
            a = tf.random.normal((n, n), dtype=tf_dtype)
            b = tf.random.normal((n, n), dtype=tf_dtype)
            last: list[Any] = [a]

            def run(count: int) -> None:
                for _ in range(count):
                    last[0] = tf.linalg.matmul(a, b)

            def sync() -> None:
                # One element back to the host waits for the matmul (ops run in order
                # on the device) without timing a copy of the whole result.
                last[0][0, 0].numpy()

            seconds, group = _time(run, sync, repeats, warmup)
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(saved_tf32)
    label = name.lstrip("/").lower()
    if not on_cpu and gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
        label = f"{label} {details.get('device_name', '')}".strip()
    return _calibration(dtype, label, n, seconds, group, warmup, "tf.linalg.matmul")


def for_run(
    measure: Callable[[str], Calibration], precision: str, tf32: bool, notes: dict[str, str]
) -> Calibration | None:
    """`measure` (`matmul_tflops` or `matmul_tflops_tensorflow`, bound to the run's device)
    in the dtype a run of `precision` multiplies in; a failure is a warning and a note in
    `notes`, never an error: the report then leaves the calibrated figures out."""
    try:
        return measure(capabilities.matmul_dtype(precision, tf32))
    except Exception as error:  # noqa: BLE001 - a failed calibration leaves the figure out
        _log.warning("calibration failed: %s", error)
        notes["calibrated_tflops"] = f"calibration failed: {error}"
        return None


def _check(dtype: str, size: int | None, repeats: int, warmup: int) -> None:
    if dtype not in DTYPES:
        valid = ", ".join(map(repr, DTYPES))
        raise ValueError(f"dtype={dtype!r} is not valid; choose one of {valid}")
    if size is not None and size < 1:
        raise ValueError(f"size={size!r} must be a positive matrix dimension")
    if repeats < 1:
        raise ValueError(f"repeats={repeats!r} must be at least 1")
    if warmup < 0:
        raise ValueError(f"warmup={warmup!r} must be 0 or more")


def _default_size(dtype: str, *, on_cpu: bool) -> int:
    if not on_cpu:
        return _GPU_SIZE
    return _CPU_HALF_SIZE if dtype in ("bf16", "fp16") else _CPU_SIZE


def _time(
    run: Callable[[int], None], sync: Callable[[], None], repeats: int, warmup: int
) -> tuple[list[float], int]:
    """Seconds per matmul for each of `repeats` timings, and the matmuls per timing."""
    sync()
    run(warmup)
    sync()
    start = time.perf_counter()
    run(1)
    sync()
    one = time.perf_counter() - start
    group = max(1, math.ceil(_MIN_TIMING_S / max(one, 1e-9)))
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        run(group)
        sync()
        seconds.append((time.perf_counter() - start) / group)
    return seconds, group


def _calibration(
    dtype: str, device: str, n: int, seconds: list[float], group: int, warmup: int, op: str
) -> Calibration:
    rates = [2 * n**3 / s / 1e12 for s in seconds]
    grouped = f", each of {group} back-to-back matmuls" if group > 1 else ""
    return Calibration(
        dtype=dtype,
        device=device,
        tflops=statistics.median(rates),
        spread=(min(rates), max(rates)),
        size=n,
        method=(
            f"median of {len(rates)} timed {n}x{n}x{n} {dtype} {op}{grouped}, "
            f"after {warmup} warm-ups; 2·n³ FLOPs each"
        ),
    )


def _torch_device(torch: Any, device: str | None) -> Any:
    if device is None:
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")
    try:
        target = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ValueError(
            f"device={device!r} is not a torch device such as 'cuda', 'cuda:0' or 'cpu' ({error})"
        ) from None
    if target.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"device={device!r} but torch.cuda.is_available() is False; use device='cpu'"
            )
        index = torch.cuda.current_device() if target.index is None else target.index
        if index >= torch.cuda.device_count():
            visible = torch.cuda.device_count()
            raise ValueError(f"device={device!r} but only {visible} CUDA device(s) are visible")
        target = torch.device("cuda", index)
    return target


def _torch_device_name(torch: Any, target: Any) -> str:
    if target.type == "cuda":
        return f"cuda:{target.index} {torch.cuda.get_device_name(target.index)}"
    return str(target)


def _tf32_for(torch: Any, dtype: str) -> Any:
    """TF32 off while measuring fp32 and on for tf32 (flags restored after); nothing
    changed for the 16-bit dtypes."""
    if dtype not in ("fp32", "tf32"):
        return contextlib.nullcontext()
    return TorchTF32(torch).forced(dtype == "tf32")
