"""Applies a plan to PyTorch: one small function per technique.

Imported only when a PyTorch plan is applied or a torch helper is used.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import functools
import gc
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from accelkit.frameworks._common import Outcome, apply_env, is_ours, set_by_us, walk
from accelkit.hardware.capabilities import TorchTF32
from accelkit.hardware.environment import TIMEOUT_ENV, dist_timeout, read_launcher
from accelkit.hardware.slurm import process_group_env
from accelkit.planning.keys import Key
from accelkit.planning.types import Plan, Setting, Status
from accelkit.utils.imports import require


def _torch() -> Any:
    return require("torch")


def apply(plan: Plan) -> Plan:
    """Apply every torch setting of `plan`; returns the plan with outcomes recorded.

    `walk` applies them in their registry phase's order: environment variables
    first (NCCL reads its variables when the process group creates a
    communicator), then framework flags, then the rank's GPU, and the process
    group last.
    """
    _torch()
    return walk(plan, appliers(), framework="torch")


# -- TF32 (accelkit.hardware.capabilities.TorchTF32 knows both PyTorch APIs) -----------


def _user_new_api(error: RuntimeError) -> Outcome:
    detail = f"set by the user through PyTorch >= 2.9's TF32 flags ({error})"
    return Status.KEPT_USER_VALUE, detail[:160]


def apply_tf32_matmul(setting: Setting) -> Outcome:
    tf32 = TorchTF32(_torch())
    current, default = tf32.matmul_precision()
    if current == tf32.wanted(bool(setting.value)):
        return Status.ALREADY_SET, f"matmul fp32 precision {current!r}"
    if current != default and not is_ours(setting.key, current):
        return Status.KEPT_USER_VALUE, f"matmul fp32 precision {current!r} set by the user"
    tf32.set(bool(setting.value))
    current, _ = tf32.matmul_precision()
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
    """cuDNN's autotuner, unless the script asked for determinism or set it itself.

    Benchmarking picks kernels by timing, so two runs may compute differently: a script
    that set ``torch.backends.cudnn.deterministic = True`` or called
    ``torch.use_deterministic_algorithms(True)`` keeps it off. ``benchmark = False`` alone
    cannot be told from PyTorch's default; ``auto_configure(deterministic=True)`` says it.
    """
    cudnn = _torch().backends.cudnn
    wanted, current = bool(setting.value), bool(cudnn.benchmark)
    if current == wanted:
        return Status.ALREADY_SET, f"benchmark={current}"
    asked = user_determinism()
    if wanted and asked:
        return Status.KEPT_USER_VALUE, (
            f"benchmark={current}: the script asked for determinism ({asked})"
        )
    if current and not is_ours(setting.key, current):
        return Status.KEPT_USER_VALUE, f"benchmark={current} set by the user"
    cudnn.benchmark = wanted
    set_by_us(setting.key, wanted)
    return Status.APPLIED, ""


def user_determinism() -> str:
    """The PyTorch flags by which the script asked for deterministic kernels, or ""."""
    torch = _torch()
    asked = []
    if torch.are_deterministic_algorithms_enabled():
        asked.append("torch.use_deterministic_algorithms(True)")
    if torch.backends.cudnn.deterministic:
        asked.append("torch.backends.cudnn.deterministic=True")
    return ", ".join(asked)


# -- allocator ---------------------------------------------------------------------


def apply_allocator(setting: Setting) -> Outcome:
    """The CUDA caching allocator reads its configuration once, when CUDA initialises."""
    torch = _torch()
    # PyTorch >= 2.9 also reads PYTORCH_ALLOC_CONF; a user value in either is kept.
    status, detail = apply_env(
        setting.key.value, str(setting.value), aliases=("PYTORCH_ALLOC_CONF",)
    )
    if status is Status.APPLIED and torch.cuda.is_initialized():
        os.environ.pop(setting.key.value, None)
        return Status.FAILED, (
            "CUDA is already initialised, so the allocator will not read "
            "it; set it before the first CUDA call or in the shell"
        )
    return status, detail


# -- distribution ------------------------------------------------------------------


def apply_device(setting: Setting) -> Outcome:
    torch = _torch()
    if not torch.cuda.is_available():
        return Status.NOT_APPLICABLE, "no CUDA device in this process"
    torch.cuda.set_device(int(setting.value))
    return Status.APPLIED, f"cuda:{setting.value}"


def apply_process_group(setting: Setting) -> Outcome:
    """Start the process group torchrun's variables describe (or SLURM's, exported for
    ``env://`` by `export_slurm_env`), unless the script did.

    The group gets a timeout (``ACCELKIT_DIST_TIMEOUT``, default 600 s): a peer that
    never arrives (a wrong world size, a dead node, an unreachable MASTER_ADDR) ends
    the rendezvous with this setting marked "could not apply" and the reason, the
    environment as it was before (the variables exported from SLURM removed again), and
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
    seconds, note, _ = dist_timeout()
    before = dict(os.environ)
    exported = export_slurm_env()
    try:
        dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=seconds))
    except Exception as error:  # noqa: BLE001 - the run goes on without a process group
        why = _rendezvous_failure(error, seconds)  # names the variables in force
        restore_environ(before)
        return Status.FAILED, why + (
            f"; the variables exported from SLURM ({', '.join(exported)}) were removed again"
            if exported
            else ""
        )
    destroy_at_exit(dist)
    detail = f"backend={backend}, world size {dist.get_world_size()}, timeout {seconds:g} s"
    if exported:
        detail += f"; from SLURM: {', '.join(f'{k}={v}' for k, v in exported.items())}"
    return Status.APPLIED, f"{detail}; {note}" if note else detail


def export_slurm_env() -> dict[str, str]:
    """Under srun without torchrun, set the variables ``init_method="env://"`` reads
    (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT...) from SLURM's; a variable
    already set (by the user or the job script) is kept. Returns those it set.

    Exported rather than passed to `init_process_group`, so that code reading RANK or
    LOCAL_RANK, as under torchrun, reads the same values.
    """
    wanted = process_group_env(read_launcher(os.environ))
    exported = {name: value for name, value in wanted.items() if name not in os.environ}
    os.environ.update(exported)
    return exported


def restore_environ(before: Mapping[str, str]) -> None:
    """Put ``os.environ`` back as `before` was: what was added since is removed, what was
    changed or removed is set back. After a failed rendezvous the process trains alone,
    and must not tell the libraries that read RANK or WORLD_SIZE otherwise; a variable the
    user set stays as the user set it.
    """
    for name in [name for name in os.environ if name not in before]:
        del os.environ[name]
    for name, value in before.items():
        if os.environ.get(name) != value:
            os.environ[name] = value


SETTLE_SECONDS = 0.2
"""How long the exit waits, the GIL released, for communication threads to finish
releasing the last collectives (`settle_at_exit`)."""


def destroy_at_exit(dist: Any) -> None:
    """At exit, destroy the process group started just now, then let its threads settle.

    Called by whoever started the group (auto_configure, or fit for FSDP2's group
    of one process); `settle_at_exit` is registered first, so it runs after.
    """
    settle_at_exit()
    atexit.register(_destroy, dist, id(dist.group.WORLD))


@functools.cache  # registered once per process
def settle_at_exit() -> None:
    """Once per process: at exit, sleep `SETTLE_SECONDS`, the GIL released, after every
    handler registered later.

    A gloo worker thread releases each collective's tensors after the rank that waited
    for it has moved on; a tensor that Python dropped meanwhile is released there, and
    that takes the GIL. A thread that takes it once the interpreter has begun to shut
    down is ended by Python inside C++ code, and the process aborts ("terminate called
    without an active exception"; a core dump shows `~AsyncAllgatherWork` in
    `ProcessGroupGloo::runLoop`, from the `all_gather_object` that ends a fit). The
    main thread keeps the GIL through the atexit handlers and the shutdown's own
    collection, so the release waited for it; the sleep hands it over. fit's figures
    gather registers it as well, for a group the script started itself.
    """
    atexit.register(time.sleep, SETTLE_SECONDS)


def _destroy(dist: Any, started: int) -> None:
    """Destroy the process group accelkit started, while the interpreter is whole.

    PyTorch asks for `destroy_process_group()` before exit; then a full collection,
    while Python is whole, frees what the script left in reference cycles. A
    DistributedDataParallel wrapper keeps the group alive even so (through C++), and
    with it gloo's threads: `settle_at_exit` is for them. The registration keeps the
    group's `id`, not the group, so as not to hold it until shutdown itself. A group
    the script destroyed or replaced is left alone; the collection runs all the same.
    """
    with contextlib.suppress(Exception):  # exiting anyway
        if dist.is_initialized() and id(dist.group.WORLD) == started:
            dist.destroy_process_group()
        gc.collect()


def _rendezvous_failure(error: Exception, seconds: float) -> str:
    env = os.environ
    first = (str(error).strip().splitlines() or [""])[0][:200].rstrip(".")
    where = f"{env.get('MASTER_ADDR', '?')}:{env.get('MASTER_PORT', '?')}"
    return (
        f"the process group did not start within {seconds:g} s ({TIMEOUT_ENV}): "
        f"{type(error).__name__}: {first}. Check that all WORLD_SIZE="
        f"{env.get('WORLD_SIZE', '?')} processes started, that {where} "
        f"(MASTER_ADDR:MASTER_PORT) is reachable from every node and the port is free. "
        f"This is rank {env.get('RANK', '?')}; accelkit.torch.fit trains it alone"
    )


def appliers() -> dict[Key, Callable[[Setting], Outcome]]:
    """The applier of each setting the adapter applies (looked up when called)."""
    return {
        Key.TORCH_TF32_MATMUL: apply_tf32_matmul,
        Key.TORCH_TF32_CUDNN: apply_tf32_cudnn,
        Key.CUDNN_BENCHMARK: apply_cudnn_benchmark,
        Key.TORCH_ALLOC_CONF: apply_allocator,
        Key.TORCH_DEVICE: apply_device,
        Key.TORCH_PROCESS_GROUP: apply_process_group,
    }
