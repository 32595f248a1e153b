"""What a GPU generation can do, and how each framework names and switches it.

The one place that knows:

- which compute capability brought which tensor-core dtype (fp16 with Volta
  7.0, bf16 and TF32 with Ampere 8.0, fp8 with Ada 8.9) and the generation
  names (`architecture_for`);
- what a precision is called in each framework (`torch_dtype_name`,
  `keras_policy`) and which dtype the matmuls of a run execute in
  (`matmul_dtype`), as the key of a datasheet peak;
- how TF32 is read and switched on the installed PyTorch, whose 2.9 release
  added `fp32_precision` flags beside the legacy ones (`TorchTF32`).

Adding a GPU generation is this module plus a row in `accelkit/specs/gpus.json`.
Nothing here imports a framework: the PyTorch helpers take the module.

Example:
    >>> has_bf16((7, 5)), has_bf16((9, 0))
    (False, True)
    >>> matmul_dtype("fp32", tf32_enabled=True)
    'tf32'
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Iterator
from typing import Any

ComputeCapability = tuple[int, int]

# NVIDIA CUDA C Programming Guide, "Compute Capabilities": tensor cores with Volta (7.0),
# bf16 and TF32 with Ampere (8.0), fp8 with Ada / Hopper (8.9).
TENSOR_CORES: ComputeCapability = (7, 0)
BF16_TF32: ComputeCapability = (8, 0)
FP8: ComputeCapability = (8, 9)

# Generation by compute capability; majors 10-12 are all Blackwell (10.x data centre,
# 11.0 Thor, numbered 10.1 before CUDA 13; 12.x RTX 50 and GB10).
_BY_CAPABILITY: dict[ComputeCapability, str] = {
    (7, 0): "volta",
    (7, 2): "volta",
    (7, 5): "turing",
    (8, 0): "ampere",
    (8, 6): "ampere",
    (8, 7): "ampere",
    (8, 9): "ada",
    (9, 0): "hopper",
}
_BY_MAJOR = {
    3: "kepler",
    5: "maxwell",
    6: "pascal",
    10: "blackwell",
    11: "blackwell",
    12: "blackwell",
}

# nvmlDeviceGetArchitecture's values, for when the compute capability is unknown.
NVML_ARCHITECTURES = {
    2: "kepler",
    3: "maxwell",
    4: "pascal",
    5: "volta",
    6: "turing",
    7: "ampere",
    8: "ada",
    9: "hopper",
    10: "blackwell",
    13: "rubin",
}


def architecture_for(compute_capability: ComputeCapability | None) -> str | None:
    """The GPU generation for a compute capability, or None when unknown.

    Example:
        >>> architecture_for((8, 9))
        'ada'
    """
    if compute_capability is None:
        return None
    major, minor = compute_capability
    return _BY_CAPABILITY.get((major, minor)) or _BY_MAJOR.get(major)


def _at_least(cc: ComputeCapability | None, floor: ComputeCapability) -> bool:
    return cc is not None and tuple(cc) >= floor


# Turing's GeForce GTX 16 parts (TU116, TU117) report compute capability 7.5 like the RTX
# 20 series but have no tensor cores (bitsandbytes-foundation/bitsandbytes#292: "technically
# Turing, but they lack tensor cores"); only the name tells them apart.
_NO_TENSOR_CORES = re.compile(r"\bgtx 16\d0\b")


def has_tensor_cores(cc: ComputeCapability | None, name: str | None = None) -> bool:
    """fp16 tensor cores (Volta and later), except the GTX 16 series when `name` is given.

    Example:
        >>> has_tensor_cores((7, 5), "NVIDIA GeForce RTX 2060"), has_tensor_cores(
        ...     (7, 5), "NVIDIA GeForce GTX 1660 SUPER")
        (True, False)
    """
    if name and _NO_TENSOR_CORES.search(name.lower()):
        return False
    return _at_least(cc, TENSOR_CORES)


def all_have_tensor_cores(gpus: Iterable[Any]) -> bool:
    """True when every GPU of known compute capability (objects with ``compute_capability``
    and ``name``, such as `accelkit.hardware.info.GpuInfo`) has fp16 tensor cores; False
    when none has a known one.

    A plan must suit the slowest GPU, and a GTX 16 card reports the same compute
    capability (7.5) as an RTX 20 card, so each GPU is judged by its name too. GPUs whose
    compute capability is unknown are left out, as `HardwareInfo.min_compute_capability`
    leaves them out.

    Example:
        >>> from accelkit.hardware.info import GpuInfo
        >>> gpus = [GpuInfo(0, "NVIDIA GeForce RTX 2080", compute_capability=(7, 5)),
        ...         GpuInfo(1, "NVIDIA GeForce GTX 1660", compute_capability=(7, 5))]
        >>> all_have_tensor_cores(gpus)
        False
    """
    found = [gpu for gpu in gpus if gpu.compute_capability]
    return bool(found) and all(has_tensor_cores(gpu.compute_capability, gpu.name) for gpu in found)


def has_bf16(cc: ComputeCapability | None) -> bool:
    """Native bf16 tensor cores (Ampere and later); `torch.cuda.is_bf16_supported()`
    says True on a T4 too, where bf16 is emulated without them."""
    return _at_least(cc, BF16_TF32)


def has_tf32(cc: ComputeCapability | None) -> bool:
    """TF32 tensor cores for fp32 matmuls (Ampere and later)."""
    return _at_least(cc, BF16_TF32)


def has_fp8(cc: ComputeCapability | None) -> bool:
    """fp8 tensor cores (Ada, Hopper and later)."""
    return _at_least(cc, FP8)


def format_capability(cc: ComputeCapability) -> str:
    return f"{cc[0]}.{cc[1]}"


# -- names -------------------------------------------------------------------------------

_HALF = {"bf16": "bfloat16", "fp16": "float16"}  # the dtype names of torch and TensorFlow
_POLICY = {"bf16": "mixed_bfloat16", "fp16": "mixed_float16"}


def _key(precision: Any) -> str:
    return str(getattr(precision, "value", precision))


def is_mixed(precision: Any) -> bool:
    """True for the 16-bit precisions (``"bf16"``, ``"fp16"``, or their `Precision`)."""
    return _key(precision) in _HALF


def torch_dtype_name(precision: Any) -> str | None:
    """The `torch` (and `tf`) dtype name of a 16-bit precision: ``"bfloat16"`` or
    ``"float16"``; None for tf32/fp32, which compute in float32."""
    return _HALF.get(_key(precision))


def keras_policy(precision: Any) -> str:
    """The Keras global dtype policy of a precision (``"float32"`` unless 16-bit)."""
    return _POLICY.get(_key(precision), "float32")


def precision_of_policy(policy: str) -> str:
    """The precision a Keras policy name computes in (``"mixed_bfloat16"`` -> ``"bf16"``)."""
    for precision, name in _POLICY.items():
        if name == policy or _HALF[precision] == policy:
            return precision
    return "fp32"


def matmul_dtype(precision: Any, tf32_enabled: bool) -> str:
    """The dtype matmuls execute in, as a `GpuSpec.peak_tflops` key.

    bf16/fp16 under mixed precision; otherwise tf32 when fp32 matmuls may use TF32
    (the ``"tf32"`` precision, or the framework's flag on), else fp32. Under ``"fp8"``,
    bf16: the step's autocast dtype, and the peak its MFU headline is counted against
    (docs/profiling.md, "MFU under float8"); the float8 share is a figure of its own.

    Example:
        >>> matmul_dtype("fp8", tf32_enabled=True)
        'bf16'
    """
    key = _key(precision)
    if key == "fp8":
        return "bf16"
    if key in _HALF:
        return key
    return "tf32" if tf32_enabled or key == "tf32" else "fp32"


# -- TF32 on the installed PyTorch -------------------------------------------------------
# PyTorch 2.9 added `fp32_precision` flags and, once they are set, raises from the
# legacy getters (`torch.get_float32_matmul_precision()`, `allow_tf32`) that Lightning
# and user code still call. Flags set through the legacy API read back through both,
# so accelkit sets the legacy ones and reads the new ones where they exist.


class TorchTF32:
    """TF32 for matmuls on the PyTorch in `torch` (the module, passed in).

    Example:
        >>> import torch
        >>> tf32 = TorchTF32(torch)
        >>> tf32.enabled()
        False
    """

    def __init__(self, torch: Any) -> None:
        self._torch = torch
        self._matmul = torch.backends.cuda.matmul
        self.new_api = hasattr(self._matmul, "fp32_precision")

    def matmul_precision(self) -> tuple[str, str]:
        """(value in force, PyTorch's untouched default) in this PyTorch's vocabulary."""
        if self.new_api:
            return self._matmul.fp32_precision, "none"
        return self._torch.get_float32_matmul_precision(), "highest"

    def wanted(self, on: bool) -> str:
        """What `matmul_precision()` reads once TF32 is set `on` (or off)."""
        if self.new_api:
            return "tf32" if on else "ieee"
        return "high" if on else "highest"

    def set(self, on: bool) -> None:
        """Switch TF32 matmuls through the legacy setter, which both APIs read back."""
        self._torch.set_float32_matmul_precision("high" if on else "highest")

    def enabled(self) -> bool:
        """True when fp32 matmuls may run in TF32 now."""
        if self.new_api:
            return self._matmul.fp32_precision == "tf32"
        return bool(self._matmul.allow_tf32)

    @contextlib.contextmanager
    def forced(self, on: bool) -> Iterator[None]:
        """TF32 on (or off) for the body; every flag restored as it was after.

        With the new API the per-backend `fp32_precision` flags are saved and
        written back as they were (including "none"), so the legacy getters behave
        afterwards exactly as before.
        """
        backends = self._torch.backends
        candidates = (self._matmul, getattr(getattr(backends, "mkldnn", None), "matmul", None))
        flags: list[Any] = [flag for flag in candidates if hasattr(flag, "fp32_precision")]
        if flags:
            saved = [flag.fp32_precision for flag in flags]
            for flag in flags:
                flag.fp32_precision = "tf32" if on else "ieee"
            try:
                yield
            finally:
                for flag, value in zip(flags, saved, strict=True):
                    flag.fp32_precision = value
            return
        previous = self._torch.get_float32_matmul_precision()
        self.set(on)
        try:
            yield
        finally:
            self._torch.set_float32_matmul_precision(previous)
