"""Applies a plan to PyTorch: one small function per technique.

Imported only when a PyTorch plan is applied or a torch helper is used.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Any

from accelkit.frameworks._common import Outcome, apply_env, is_ours, set_by_us, walk
from accelkit.planning.runtime import ALLOC_CONF
from accelkit.planning.types import Plan, Precision, Setting, Status
from accelkit.utils.imports import require

if TYPE_CHECKING:
    import torch


def _torch() -> Any:
    return require("torch")


def apply(plan: Plan) -> Plan:
    """Apply every torch setting of `plan`; returns the plan with outcomes recorded."""
    _torch()
    return walk(plan, {
        "torch.backends.cuda.matmul.allow_tf32": apply_tf32_matmul,
        "torch.backends.cudnn.allow_tf32": apply_tf32_cudnn,
        "torch.backends.cudnn.benchmark": apply_cudnn_benchmark,
        ALLOC_CONF: apply_allocator,
        "torch.cuda.set_device": apply_device,
        "torch.distributed.backend": apply_process_group,
    }, framework="torch")


# -- TF32 --------------------------------------------------------------------------
# PyTorch 2.9 added `fp32_precision` flags and, once they are set, raises from the
# legacy getters (`torch.get_float32_matmul_precision()`, `allow_tf32`) that
# Lightning and user code still call. Flags set through the legacy API read back
# through both, so accelkit sets the legacy ones; a user who set the new ones is
# detected by the legacy getter raising, and kept.

def _user_new_api(error: RuntimeError) -> Outcome:
    return Status.KEPT_USER_VALUE, f"set by the user through fp32_precision ({error})"[:160]


def _matmul_precision(torch: Any) -> tuple[str, str]:
    """(current value, untouched default) in the vocabulary of the installed torch."""
    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):
        return matmul.fp32_precision, "none"
    return torch.get_float32_matmul_precision(), "highest"


def apply_tf32_matmul(setting: Setting) -> Outcome:
    torch = _torch()
    current, default = _matmul_precision(torch)
    if default == "none":
        wanted = "tf32" if setting.value else "ieee"
    else:
        wanted = "high" if setting.value else "highest"
    if current == wanted:
        return Status.ALREADY_SET, f"matmul fp32 precision {current!r}"
    if current != default and not is_ours(setting.key, current):
        return Status.KEPT_USER_VALUE, f"matmul fp32 precision {current!r} set by the user"
    torch.set_float32_matmul_precision("high" if setting.value else "highest")
    current, _ = _matmul_precision(torch)
    set_by_us(setting.key, current)
    return Status.APPLIED, f"matmul fp32 precision {current!r}"


def apply_tf32_cudnn(setting: Setting) -> Outcome:
    """cuDNN's TF32 flag; PyTorch's default is already on, so only fp32 plans change it."""
    cudnn = _torch().backends.cudnn
    try:
        current = cudnn.allow_tf32
    except RuntimeError as error:
        return _user_new_api(error)
    if current == bool(setting.value):
        return Status.ALREADY_SET, f"allow_tf32={current}"
    cudnn.allow_tf32 = bool(setting.value)
    return Status.APPLIED, ""


def apply_cudnn_benchmark(setting: Setting) -> Outcome:
    torch = _torch()
    if torch.backends.cudnn.benchmark == bool(setting.value):
        return Status.ALREADY_SET, f"benchmark={torch.backends.cudnn.benchmark}"
    torch.backends.cudnn.benchmark = bool(setting.value)
    return Status.APPLIED, ""


# -- allocator ---------------------------------------------------------------------

def apply_allocator(setting: Setting) -> Outcome:
    """The CUDA caching allocator reads its configuration once, when CUDA initialises."""
    torch = _torch()
    # PyTorch >= 2.9 also reads PYTORCH_ALLOC_CONF; a user value in either is kept.
    status, detail = apply_env(setting.key, str(setting.value), aliases=("PYTORCH_ALLOC_CONF",))
    if status is Status.APPLIED and torch.cuda.is_initialized():
        os.environ.pop(setting.key, None)
        return Status.FAILED, ("CUDA is already initialised, so the allocator will not read "
                               "it; set it before the first CUDA call or in the shell")
    return status, detail


# -- distribution ------------------------------------------------------------------

def apply_device(setting: Setting) -> Outcome:
    torch = _torch()
    if not torch.cuda.is_available():
        return Status.NOT_APPLICABLE, "no CUDA device in this process"
    torch.cuda.set_device(int(setting.value))
    return Status.APPLIED, f"cuda:{setting.value}"


def apply_process_group(setting: Setting) -> Outcome:
    """Start the process group torchrun's variables describe, unless the script did."""
    torch = _torch()
    dist = torch.distributed
    if not dist.is_available():
        return Status.FAILED, "this PyTorch build has no torch.distributed"
    if dist.is_initialized():
        return Status.KEPT_USER_VALUE, f"process group already started ({dist.get_backend()})"
    backend = str(setting.value)
    if backend == "nccl" and not torch.cuda.is_available():
        backend = "gloo"
    dist.init_process_group(backend=backend)
    return Status.APPLIED, f"backend={backend}, world size {dist.get_world_size()}"


# -- helpers -----------------------------------------------------------------------

_DTYPES = {Precision.BF16: "bfloat16", Precision.FP16: "float16"}


def autocast(plan: Plan, device_type: str | None = None) -> contextlib.AbstractContextManager[Any]:
    """`torch.autocast` in the plan's 16-bit dtype, or a do-nothing context."""
    torch = _torch()
    if plan.precision not in _DTYPES:
        return contextlib.nullcontext()
    device_type = device_type or ("cuda" if torch.cuda.is_available() else "cpu")
    return torch.autocast(device_type=device_type, dtype=getattr(torch, _DTYPES[plan.precision]))


def grad_scaler(plan: Plan) -> torch.amp.GradScaler:
    """A GradScaler that scales only for fp16 plans; otherwise its calls pass through."""
    torch = _torch()
    device_type = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.amp.GradScaler(device_type, enabled=plan.precision is Precision.FP16)
