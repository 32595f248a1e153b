"""`auto_configure`, `plan_for` and `apply`: the entry points a training script calls."""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from accelkit import frameworks
from accelkit.hardware import detect, environment
from accelkit.hardware.environment import DISABLE_ENV, PRECISION_ENV
from accelkit.hardware.info import HardwareInfo
from accelkit.hardware.what_if import what_if
from accelkit.planning import Framework, Plan, Precision, Request, Status, plan
from accelkit.planning.types import whole_number
from accelkit.utils.imports import install_command, is_available

# What precision="fp8" runs its float8 matmuls with (the `fp8` extra installs it).
FLOAT8_PACKAGE = "torchao"

_current: Plan | None = None
_log = logging.getLogger("accelkit")


def current_plan(framework: str | Framework | None = None) -> Plan | None:
    """The plan the last `auto_configure` or `apply` call returned in this process, if any.

    Args:
        framework: only a plan for this framework (a script using both can hold
            either framework's plan): ``"torch"`` or ``"tensorflow"``; None: any.
    """
    if framework is None or _current is None:
        return _current
    return _current if _current.framework is Framework.parse(framework) else None


def set_current_plan(plan: Plan | None) -> None:
    """Make `plan` the one the fits, meters and callbacks follow, without applying it
    (None: no current plan, so the next fit plans for itself)."""
    global _current
    if plan is not None and not isinstance(plan, Plan):
        raise TypeError(f"set_current_plan takes a Plan or None, not {type(plan).__name__}")
    _current = plan


def auto_configure(
    framework: str = "auto",
    precision: str = "auto",
    distribute: str = "auto",
    compile: bool = False,
    dry_run: bool = False,
    verbose: bool = True,
    *,
    deterministic: bool = False,
    hardware: HardwareInfo | None = None,
) -> Plan:
    """Detect the GPUs, plan the settings for them and apply the plan.

    Call it at the top of a training script, before building models. Values the
    user set (environment variables, framework flags, a Keras policy) are kept;
    calling it twice changes nothing the second time.

    With ``framework="auto"`` the framework is the one the script uses, and a
    framework the script does not use is never imported: one it has imported
    already; else the one its ``__main__`` file (or ``python -c`` code) imports,
    read without running it (``import keras`` counts as the framework Keras runs
    on: ``KERAS_BACKEND``, else ``keras.json``, else TensorFlow); else the one
    ``KERAS_BACKEND`` names. When that leaves both frameworks (each is configured)
    or neither (a notebook, code from stdin: the first one imported is), nothing
    is applied yet: the framework's plan is applied right after the script imports
    it, before TensorFlow initialises its GPUs, and becomes `current_plan()`. The
    plan's notes say what was decided and why.
    Keras on the ``torch`` backend gets the PyTorch plan (its settings are the ones
    Keras's kernels see); on ``jax`` or ``numpy``, a plan to read, applied to nothing.

    Args:
        framework: ``"auto"`` (the one the script uses), ``"torch"`` or ``"tensorflow"``.
        precision: ``"auto"``, ``"bf16"``, ``"fp16"``, ``"tf32"``, ``"fp32"`` or ``"fp8"``
            (bf16 with float8 matmuls through torchao: PyTorch on compute capability
            >= 8.9, ``pip install 'accelkit[fp8]'``). ``ACCELKIT_PRECISION`` takes the
            place of ``"auto"``.
        distribute: ``"auto"`` or ``"none"``.
        compile: ask for ``torch.compile`` / XLA in the fit helpers.
        dry_run: plan but apply nothing (so does ``ACCELKIT_DISABLE=1``). The plan is
            marked unapplied (``plan.not_applied``): a fit that finds it as the current
            plan trains as the script alone would (float32, no channels-last, no
            compile); one given it as ``plan=`` follows it.
        verbose: print the plan table to stderr (rank 0 only).
        deterministic: the run must repeat bit for bit: no cuDNN benchmarking (planned
            off). Without it, a script that called
            ``torch.use_deterministic_algorithms(True)`` or set
            ``torch.backends.cudnn.deterministic = True`` keeps benchmarking off too
            ("kept user value").
        hardware: plan for this snapshot instead of detecting.

    Returns:
        The `Plan`, each setting with what happened to it ("planned" when the
        framework is decided at import: `current_plan()` holds the applied plan then).
        GPUs the installed framework cannot use (a PyTorch or TensorFlow built without
        CUDA) are planned as the CPU they run on, with a warning in the log and a note
        naming the fix.

    Raises:
        ValueError: a bad argument or ``ACCELKIT_PRECISION`` value (the message names
            the valid ones), or a precision these GPUs cannot run (``"fp8"`` below
            compute capability 8.9, or without torchao installed).

    Example:
        >>> import accelkit
        >>> import torch
        >>> plan = accelkit.auto_configure()
        >>> model, x, y = torch.nn.Linear(8, 2), torch.randn(4, 8), torch.tensor([0, 1, 1, 0])
        >>> with plan.autocast():
        ...     loss = torch.nn.functional.cross_entropy(model(x), y)
    """
    global _current
    if hardware is not None and not isinstance(hardware, HardwareInfo):
        raise ValueError(
            f"hardware={hardware!r:.80} is not valid; give a HardwareInfo "
            "(accelkit.detect(), accelkit.what_if(...)) or None to detect"
        )
    decision = frameworks.resolve(framework)
    hardware = hardware if hardware is not None else detect()
    requests = {
        chosen: _request(chosen, precision, distribute, compile, deterministic)
        for chosen in (decision.framework, *decision.at_import)
    }
    plans = {chosen: plan(hardware, request) for chosen, request in requests.items()}
    _check_float8(requests.get(Framework.TORCH))
    _warn_unusable(plans.values())
    result = plans[decision.framework]
    notes = [f"framework: {decision.reason}"]
    if requests[decision.framework].precision is not Precision.AUTO and precision == "auto":
        notes.append(f"precision from {PRECISION_ENV}={os.environ[PRECISION_ENV]!r}")
    frameworks.stop_at_import()  # this call replaces what an earlier one left waiting
    deferred = False
    if not is_available(decision.framework.value):
        notes.append(
            f"{decision.framework.value} is not installed: nothing applied "
            f"({install_command(decision.framework.value)})"
        )
        result = result.as_unapplied(notes[-1])
    elif old := _too_old(decision.framework):
        notes.append(
            f"{old}: nothing applied ({install_command(decision.framework.value, upgrade=True)})"
        )
        result = result.as_unapplied(notes[-1])
    elif dry_run or environment.flag(DISABLE_ENV):
        notes.append(
            "dry run: nothing applied"
            if dry_run
            else f"{DISABLE_ENV}={os.environ[DISABLE_ENV]}: nothing applied"
        )
        result = result.as_unapplied(notes[-1])
    elif decision.at_import:
        frameworks.at_import(decision, _applier_at_import(plans, notes[1:], verbose))
        deferred = True
    elif decision.applies:
        result = _apply(result)
    result = result.with_settings(result.settings, notes)
    _current = result
    if verbose:  # rank 0 only: the logger's filter (accelkit.utils.log)
        _log.info("%s", f"accelkit: {notes[0]}" if deferred else result)
    return result


def _check_float8(request: Request | None) -> None:
    """An explicit fp8 on PyTorch needs torchao (float8 matmuls): without it the request
    cannot be honoured, so it is refused with the install command."""
    if request is None or request.precision is not Precision.FP8:
        return
    if not is_available(FLOAT8_PACKAGE):
        raise ValueError(
            f"precision='fp8' runs float8 matmuls through {FLOAT8_PACKAGE}, which is not "
            f"installed; install it with: {install_command('fp8')}, or use 'bf16'"
        )


def _too_old(framework: Framework) -> str | None:
    """Why the installed `framework` is older than accelkit supports, read from its
    metadata without importing it; None when it is recent enough or unknown."""
    from accelkit.utils.versions import too_old  # packaging, only when configuring

    names = ("tensorflow", "keras") if framework is Framework.TENSORFLOW else ("torch",)
    return next((why for why in map(too_old, names) if why), None)


def _applier_at_import(
    plans: Mapping[Framework, Plan], notes: list[str], verbose: bool
) -> Callable[[Framework, str], None]:
    """What the import hook calls once the script has imported a framework: apply its
    plan and make it the current one."""

    def apply_at_import(framework: Framework, module: str) -> None:
        applied = _apply(plans[framework])
        applied = applied.with_settings(
            applied.settings,
            [f"framework: decided at import: the script imported {module}", *notes],
        )
        set_current_plan(applied)
        _log.info(
            "accelkit applied the %s plan when the script imported %s", framework.value, module
        )
        if verbose:
            _log.info("%s", applied)

    return apply_at_import


def _request(
    framework: Any, precision: str, distribute: str, compile: bool, deterministic: bool
) -> Request:
    env_precision = os.environ.get(PRECISION_ENV, "").strip()
    if env_precision and str(precision).strip().lower() == "auto":
        try:
            Precision.parse(env_precision)
        except ValueError as error:
            raise ValueError(f"{PRECISION_ENV}: {error}") from None
        precision = env_precision
    return Request(
        framework=framework,
        precision=precision,
        distribute=distribute,
        compile=compile,
        deterministic=deterministic,
    )


def apply(plan: Plan) -> Plan:
    """Apply `plan` (from `plan_for` or `accelkit.planning.plan`) to its framework and
    make it the current plan, which the fits, meters and callbacks then follow.

    Never raises over a setting: each one records applied, kept user value,
    already set, not applicable, deferred to a helper, or could not apply (why).
    A missing framework raises ImportError with the install command.

    Example:
        >>> import accelkit
        >>> plan = accelkit.apply(accelkit.plan_for(None, framework="torch"))  # no GPU: fp32
        >>> accelkit.current_plan() is plan
        True
    """
    global _current
    _current = _apply(plan)
    return _current


def _apply(plan: Plan) -> Plan:
    plan = dataclasses.replace(plan, not_applied="")  # a dry run's plan, applied now
    try:
        return frameworks.apply(plan)
    except ImportError:
        raise
    except Exception as error:  # noqa: BLE001 - configuring must never fail the run
        settings = [
            s.with_status(Status.FAILED, f"{type(error).__name__}: {error}") for s in plan.settings
        ]
        return plan.with_settings(settings, [f"applying the plan failed: {error}"])


def plan_for(
    gpu: str | None = None, count: int = 1, framework: str = "torch", **request: Any
) -> Plan:
    """The plan for hardware you don't have: `count` GPUs of model `gpu` (None: no GPU).

    Args:
        gpu: a GPU name or alias (`accelkit specs` lists them).
        count: how many.
        framework: ``"torch"`` or ``"tensorflow"``.
        **request: ``precision``, ``distribute``, ``compile``, ``fixed_shapes``,
            ``deterministic``; the model's size for the memory estimate: ``params``
            (parameter count, e.g. 8e9), ``trainable_params`` (default: all),
            ``frozen_dtype`` (how the others are held: ``"fp32"``, the default,
            ``"bf16"``, ``"fp16"``, ``"int8"``, ``"int4"``: a LoRA's or QLoRA's base),
            ``optimizer`` (``"adamw"``, ``"adam"``, ``"adamw_8bit"``, ``"adafactor"``,
            ``"sgd_momentum"``, ``"sgd"``), ``activation_bytes`` (per GPU, measured;
            default unknown); and ``environ`` (launcher variables such as torchrun's
            or TF_CONFIG).

    Returns:
        The `Plan`; with ``params``, ``plan.memory`` (`MemoryEstimate`) holds the bytes
        per GPU and the choice (DDP, FSDP2, checkpointing, CPU offload, or "does not
        fit"), and the settings ``sharding``, ``activation_checkpointing`` and
        ``fsdp.cpu_offload`` (or ``memory``, the refusal) carry the reasons.

    Raises:
        UnknownGPUError: no datasheet row for `gpu` (the message suggests names).
        ValueError: a bad argument.

    Example:
        >>> import accelkit
        >>> accelkit.plan_for("Tesla T4", framework="tensorflow").precision.value
        'fp16'
        >>> accelkit.plan_for("H100", count=8, params=8e9).memory.choice
        'fsdp2'
    """
    environ: Mapping[str, str] | None = request.pop("environ", None)
    valid = {f.name for f in dataclasses.fields(Request)} - {"framework"}
    unknown = sorted(set(request) - valid)
    if unknown:
        raise ValueError(
            f"plan_for() got unknown argument(s) {', '.join(unknown)}; "
            f"valid: {', '.join(sorted(valid | {'environ'}))}"
        )
    if str(framework).lower() == "auto":
        raise ValueError("plan_for(framework='auto') is not valid; use 'torch' or 'tensorflow'")
    return plan(
        what_if(gpu, _integral(count), environ=environ), Request(framework=framework, **request)
    )


def _integral(count: Any) -> Any:
    """A GPU count from NumPy (``np.int64(8)``) as the int it is; anything else unchanged,
    for `what_if` to accept or refuse with its message (bools and floats are refused)."""
    if isinstance(count, (bool, float)) or not hasattr(type(count), "__index__"):
        return count
    whole = whole_number(count)
    return count if whole is None else whole


def _warn_unusable(plans: Iterable[Plan]) -> None:
    """Loudly: each framework that cannot use the GPUs here (built without CUDA)."""
    for planned in plans:
        if planned.hardware.gpus_unusable:
            _log.warning("accelkit: %s", planned.hardware.gpus_unusable)
