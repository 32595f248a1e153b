"""`auto_configure`, `plan_for` and `apply`: the entry points a training script calls."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping
from typing import Any

from accelkit import frameworks
from accelkit.hardware import detect, environment
from accelkit.hardware.environment import DISABLE_ENV, PRECISION_ENV
from accelkit.hardware.info import HardwareInfo
from accelkit.hardware.what_if import what_if
from accelkit.planning import Plan, Precision, Request, Status, plan
from accelkit.utils.imports import is_available

_current: Plan | None = None


def current_plan() -> Plan | None:
    """The plan the last `auto_configure` or `apply` call returned in this process, if any."""
    return _current


def set_current_plan(plan: Plan | None) -> None:
    """Make `plan` the one the fits, meters and callbacks follow, without applying it
    (None: no current plan, so the next fit plans for itself)."""
    global _current
    if plan is not None and not isinstance(plan, Plan):
        raise TypeError(f"set_current_plan takes a Plan or None, not {type(plan).__name__}")
    _current = plan


def auto_configure(framework: str = "auto", precision: str = "auto", distribute: str = "auto",
                   compile: bool = False, dry_run: bool = False, verbose: bool = True, *,
                   hardware: HardwareInfo | None = None) -> Plan:
    """Detect the GPUs, plan the settings for them and apply the plan.

    Call it at the top of a training script, before building models. Values the
    user set (environment variables, framework flags, a Keras policy) are kept;
    calling it twice changes nothing the second time.

    Args:
        framework: ``"auto"`` (the one imported or installed), ``"torch"`` or ``"tensorflow"``.
        precision: ``"auto"``, ``"bf16"``, ``"fp16"``, ``"tf32"`` or ``"fp32"``.
            ``ACCELKIT_PRECISION`` takes the place of ``"auto"``.
        distribute: ``"auto"`` or ``"none"``.
        compile: ask for ``torch.compile`` / XLA in the fit helpers.
        dry_run: plan but apply nothing (so does ``ACCELKIT_DISABLE=1``).
        verbose: print the plan table to stderr (rank 0 only).
        hardware: plan for this snapshot instead of detecting.

    Returns:
        The `Plan`, each setting with what happened to it.

    Raises:
        ValueError: a bad argument or ``ACCELKIT_PRECISION`` value (the message names
            the valid ones), or a precision these GPUs cannot run.

    Example:
        >>> import accelkit
        >>> plan = accelkit.auto_configure()
        >>> with plan.autocast():
        ...     loss = loss_fn(model(x), y)
    """
    global _current
    chosen, framework_reason = frameworks.resolve(framework)
    request = _request(chosen, precision, distribute, compile)
    hardware = hardware if hardware is not None else detect()
    result = plan(hardware, request)
    notes = [f"framework: {framework_reason}"]
    if request.precision is not Precision.AUTO and precision == "auto":
        notes.append(f"precision from {PRECISION_ENV}={os.environ[PRECISION_ENV]!r}")
    if not is_available(chosen.value):
        notes.append(f"{chosen.value} is not installed: nothing applied "
                     f"(pip install 'accelkit[{chosen.value}]')")
        result = result.with_settings(result.settings, notes)
    elif dry_run or environment.flag(DISABLE_ENV):
        notes.append("dry run: nothing applied" if dry_run
                     else f"{DISABLE_ENV}={os.environ[DISABLE_ENV]}: nothing applied")
        result = result.with_settings(result.settings, notes)
    else:
        result = _apply(result)
        result = result.with_settings(result.settings, notes)
    _current = result
    if verbose and environment.is_rank_zero():
        print(result, file=sys.stderr)
    return result


def _request(framework: Any, precision: str, distribute: str, compile: bool) -> Request:
    env_precision = os.environ.get(PRECISION_ENV, "").strip()
    if env_precision and str(precision).strip().lower() == "auto":
        try:
            Precision.parse(env_precision)
        except ValueError as error:
            raise ValueError(f"{PRECISION_ENV}: {error}") from None
        precision = env_precision
    return Request(framework=framework, precision=precision, distribute=distribute,
                   compile=compile)


def apply(plan: Plan) -> Plan:
    """Apply `plan` (from `plan_for` or `accelkit.planning.plan`) to its framework and
    make it the current plan, which the fits, meters and callbacks then follow.

    Never raises over a setting: each one records applied, kept user value,
    already set, not applicable, deferred to a helper, or could not apply (why).
    A missing framework raises ImportError with the install command.

    Example:
        >>> plan = accelkit.apply(accelkit.plan_for("Tesla T4", framework="tensorflow"))
        >>> accelkit.current_plan() is plan
        True
    """
    global _current
    _current = _apply(plan)
    return _current


def _apply(plan: Plan) -> Plan:
    try:
        return frameworks.apply(plan)
    except ImportError:
        raise
    except Exception as error:  # noqa: BLE001 - configuring must never fail the run
        settings = [s.with_status(Status.FAILED, f"{type(error).__name__}: {error}")
                    for s in plan.settings]
        return plan.with_settings(settings, [f"applying the plan failed: {error}"])


def plan_for(gpu: str | None = None, count: int = 1, framework: str = "torch",
             **request: Any) -> Plan:
    """The plan for hardware you don't have: `count` GPUs of model `gpu` (None: no GPU).

    Args:
        gpu: a GPU name or alias (`accelkit specs` lists them).
        count: how many.
        framework: ``"torch"`` or ``"tensorflow"``.
        **request: ``precision``, ``distribute``, ``compile``, ``fixed_shapes``, and
            ``environ`` (launcher variables such as torchrun's or TF_CONFIG).

    Raises:
        UnknownGPUError: no datasheet row for `gpu` (the message suggests names).
        ValueError: a bad argument.

    Example:
        >>> accelkit.plan_for("Tesla T4", framework="tensorflow").precision.value
        'fp16'
    """
    environ: Mapping[str, str] | None = request.pop("environ", None)
    valid = {f.name for f in dataclasses.fields(Request)} - {"framework"}
    unknown = sorted(set(request) - valid)
    if unknown:
        raise ValueError(f"plan_for() got unknown argument(s) {', '.join(unknown)}; "
                         f"valid: {', '.join(sorted(valid | {'environ'}))}")
    if str(framework).lower() == "auto":
        raise ValueError("plan_for(framework='auto') is not valid; use 'torch' or 'tensorflow'")
    return plan(what_if(gpu, count, environ=environ), Request(framework=framework, **request))

