"""What both adapters share: environment variables, helper settings, the record
of what accelkit itself set (so re-applying is idempotent and never mistakes
accelkit's own earlier value for the user's)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, MutableMapping

from accelkit.planning.keys import Key, Kind, entry
from accelkit.planning.types import Plan, Setting, Status

Outcome = tuple[Status, str]

# key -> value accelkit set in this process.
_ours: dict[str, object] = {}


def forget() -> None:
    """Forget what accelkit set in this process, so the next apply treats every value
    in force as the user's (tests start from here)."""
    _ours.clear()


def set_by_us(key: str, value: object) -> None:
    _ours[key] = value


def is_ours(key: str, current: object) -> bool:
    return key in _ours and _ours[key] == current


def apply_env(
    key: str,
    value: str,
    *,
    aliases: tuple[str, ...] = (),
    environ: MutableMapping[str, str] | None = None,
) -> Outcome:
    """Set an environment variable unless the user set it (or an alias) already."""
    environ = os.environ if environ is None else environ
    for name in (key, *aliases):
        current = environ.get(name)
        if current is None:
            continue
        if current == value:
            return Status.ALREADY_SET, f"{name}={current}"
        if not is_ours(name, current):
            return Status.KEPT_USER_VALUE, f"{name}={current!r} set by the user"
    environ[key] = value
    set_by_us(key, value)
    return Status.APPLIED, ""


Appliers = Mapping[Key, Callable[[Setting], Outcome]]


def walk(plan: Plan, appliers: Appliers, framework: str) -> Plan:
    """Apply each setting of `plan` with its applier and record the outcome.

    Settings are applied in the order of their registry phase (environment first,
    the process group last), whatever the plan's order; the returned plan keeps
    the plan's order. A helper's setting is marked deferred to the helper the
    registry names; advice is left to the user. An exception inside one applier
    marks that setting "could not apply" with the error and the walk goes on:
    accelkit never fails a run over a setting.
    """
    outcomes: dict[int, Outcome] = {}
    order = sorted(range(len(plan.settings)), key=lambda i: entry(plan.settings[i].key).phase)
    for index in order:
        outcomes[index] = _outcome(plan.settings[index], appliers, framework)
    return plan.with_settings(
        setting.with_status(*outcomes[i]) for i, setting in enumerate(plan.settings)
    )


def _outcome(setting: Setting, appliers: Appliers, framework: str) -> Outcome:
    registered = entry(setting.key)
    if registered.framework not in (framework, "any"):
        return Status.NOT_APPLICABLE, f"for {registered.framework}"
    if registered.kind is Kind.ADVICE:
        return Status.ADVICE, ""
    if not registered.by_adapter:
        return Status.DEFERRED, f"applied by {registered.applied_by}"
    applier = appliers.get(setting.key)
    if applier is None and registered.kind is Kind.ENV:
        applier = _set_env
    if applier is None:  # tests/planning/test_keys.py keeps this from happening
        return Status.FAILED, "no applier for this setting in this accelkit version"
    return _guarded(applier, setting)


def _set_env(setting: Setting) -> Outcome:
    return apply_env(setting.key.value, str(setting.value))


def _guarded(applier: Callable[[Setting], Outcome], setting: Setting) -> Outcome:
    try:
        return applier(setting)
    except Exception as error:  # noqa: BLE001 - a setting must never fail the run
        return Status.FAILED, f"{type(error).__name__}: {error}"
