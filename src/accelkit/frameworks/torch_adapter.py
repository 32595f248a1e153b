"""Applies a plan to PyTorch: one small function per technique.

Imported only when a PyTorch plan is applied or a torch helper is used.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import os
from collections.abc import Mapping
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
    """Apply every torch setting of `plan`; returns the plan with outcomes recorded.

    Settings are applied in the order their effects need, whatever the plan's order:
    environment variables first (NCCL reads its variables when the process group
    creates a communicator), then framework flags, then the rank's GPU, and the
    process group last. The returned plan keeps the plan's order.
    """
    _torch()
    order = sorted(range(len(plan.settings)), key=lambda i: _phase(plan.settings[i]))
    walked = walk(plan.with_settings([plan.settings[i] for i in order]), {
        "torch.backends.cuda.matmul.allow_tf32": apply_tf32_matmul,
        "torch.backends.cudnn.allow_tf32": apply_tf32_cudnn,
        "torch.backends.cudnn.benchmark": apply_cudnn_benchmark,
        ALLOC_CONF: apply_allocator,
        "torch.cuda.set_device": apply_device,
        "torch.distributed.backend": apply_process_group,
    }, framework="torch")
    settings: list[Setting] = list(plan.settings)
    for position, index in enumerate(order):
        settings[index] = walked.settings[position]
    return plan.with_settings(settings)


_LAST = ("torch.cuda.set_device", "torch.distributed.backend")


def _phase(setting: Setting) -> int:
    if setting.kind == "env":
        return 0
    if setting.key in _LAST:
        return 2 + _LAST.index(setting.key)
    return 1


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


TIMEOUT_ENV = "ACCELKIT_DIST_TIMEOUT"
DEFAULT_TIMEOUT_S = 600.0  # NCCL's own default collective timeout in PyTorch


def dist_timeout(environ: Mapping[str, str] | None = None) -> tuple[float, str]:
    """Seconds the process group waits for its peers (rendezvous and each collective),
    from ``ACCELKIT_DIST_TIMEOUT``; a value that is not a number > 0 gives the default,
    with a note saying so.

    Example:
        >>> dist_timeout({"ACCELKIT_DIST_TIMEOUT": "30"})
        (30.0, '')
    """
    environ = os.environ if environ is None else environ
    text = environ.get(TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_TIMEOUT_S, ""
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not seconds > 0 or seconds == float("inf"):
        return DEFAULT_TIMEOUT_S, (f"{TIMEOUT_ENV}={text!r} is not a number of seconds > 0; "
                                   f"used {DEFAULT_TIMEOUT_S:g} s")
    return seconds, ""


def apply_process_group(setting: Setting) -> Outcome:
    """Start the process group torchrun's variables describe, unless the script did.

    The group gets a timeout (``ACCELKIT_DIST_TIMEOUT``, default 600 s): a peer that
    never arrives (a wrong world size, a dead node, an unreachable MASTER_ADDR) ends
    the rendezvous with this setting marked "could not apply" and the reason, and
    `accelkit.torch.fit` then trains this process alone, saying so; a peer that dies
    later fails its collectives after the same time instead of hanging.
    """
    torch = _torch()
    dist = torch.distributed
    if not dist.is_available():
        return Status.FAILED, "this PyTorch build has no torch.distributed"
    if dist.is_initialized():
        return Status.KEPT_USER_VALUE, f"process group already started ({dist.get_backend()})"
    backend = str(setting.value)
    if backend == "nccl" and not torch.cuda.is_available():
        backend = "gloo"
    seconds, note = dist_timeout()
    try:
        dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=seconds))
    except Exception as error:  # noqa: BLE001 - the run goes on without a process group
        return Status.FAILED, _rendezvous_failure(error, seconds)
    atexit.register(_destroy_at_exit, dist, dist.group.WORLD)
    detail = f"backend={backend}, world size {dist.get_world_size()}, timeout {seconds:g} s"
    return Status.APPLIED, f"{detail}; {note}" if note else detail


def _destroy_at_exit(dist: Any, started: Any) -> None:
    """Destroy the process group accelkit started, while the interpreter is whole.

    Left to interpreter shutdown, gloo's worker threads can free tensors after
    Python is gone and abort the process (SIGABRT) at exit; PyTorch asks for
    `destroy_process_group()` before exit. A group the script destroyed (or
    replaced) itself is left alone.
    """
    with contextlib.suppress(Exception):  # exiting anyway
        if dist.is_initialized() and dist.group.WORLD is started:
            dist.destroy_process_group()


def _rendezvous_failure(error: Exception, seconds: float) -> str:
    env = os.environ
    first = (str(error).strip().splitlines() or [""])[0][:200].rstrip(".")
    where = f"{env.get('MASTER_ADDR', '?')}:{env.get('MASTER_PORT', '?')}"
    return (f"the process group did not start within {seconds:g} s ({TIMEOUT_ENV}): "
            f"{type(error).__name__}: {first}. Check that all WORLD_SIZE="
            f"{env.get('WORLD_SIZE', '?')} processes started, that {where} "
            f"(MASTER_ADDR:MASTER_PORT) is reachable from every node and the port is free. "
            f"This is rank {env.get('RANK', '?')}; accelkit.torch.fit trains it alone")


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
