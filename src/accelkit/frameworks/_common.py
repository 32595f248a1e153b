"""What both adapters share: environment variables, helper settings, the record
of what accelkit itself set (so re-applying is idempotent and never mistakes
accelkit's own earlier value for the user's)."""

from __future__ import annotations

import os
from collections.abc import Callable, MutableMapping

from accelkit.planning.types import Plan, Setting, Status

Outcome = tuple[Status, str]

# key -> value accelkit set in this process.
_ours: dict[str, object] = {}


def set_by_us(key: str, value: object) -> None:
    _ours[key] = value


def is_ours(key: str, current: object) -> bool:
    return key in _ours and _ours[key] == current


def apply_env(key: str, value: str, *, aliases: tuple[str, ...] = (),
              environ: MutableMapping[str, str] | None = None) -> Outcome:
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


HELPERS = {
    "precision": "plan.autocast() / accelkit.torch.fit",
    "autocast.dtype": "plan.autocast() / accelkit.torch.fit",
    "outputs.float32": "accelkit.torch.fit",
    "grad_scaler": "plan.grad_scaler() / accelkit.torch.fit",
    "channels_last": "accelkit.torch.fit",
    "torch.compile": "accelkit.torch.fit",
    "keras.float32_head": "accelkit.keras.float32_head(model) / accelkit.keras.fit",
    "keras.loss_scale": "model.compile() under the mixed_float16 policy",
    "keras.jit_compile": "accelkit.keras.fit",
    "tf.distribute.Strategy": "plan.strategy",
}


def walk(plan: Plan, appliers: dict[str, Callable[[Setting], Outcome]],
         framework: str) -> Plan:
    """Apply each setting with its applier and record the outcome.

    An exception inside one applier marks that setting "could not apply" with
    the error and the walk goes on: accelkit never fails a run over a setting.
    """
    settings = []
    for setting in plan.settings:
        if setting.framework not in (framework, "any"):
            outcome: Outcome = (Status.NOT_APPLICABLE, f"for {setting.framework}")
        elif setting.kind == "advice":
            outcome = (Status.ADVICE, "")
        elif setting.kind == "helper" and setting.key not in appliers:
            outcome = (Status.DEFERRED, f"applied by {HELPERS.get(setting.key, 'accelkit')}")
        elif setting.kind == "env" and setting.key not in appliers:
            outcome = _guarded(lambda s: apply_env(s.key, str(s.value)), setting)
        elif setting.key in appliers:
            outcome = _guarded(appliers[setting.key], setting)
        else:
            outcome = (Status.FAILED, "no applier for this setting in this accelkit version")
        settings.append(setting.with_status(*outcome))
    return plan.with_settings(settings)


def _guarded(applier: Callable[[Setting], Outcome], setting: Setting) -> Outcome:
    try:
        return applier(setting)
    except Exception as error:  # noqa: BLE001 - a setting must never fail the run
        return Status.FAILED, f"{type(error).__name__}: {error}"
