"""Framework adapters: each applies a `Plan` to its framework, imported lazily."""

from __future__ import annotations

from accelkit.planning.types import Framework, Plan
from accelkit.utils.imports import is_available, is_imported


def resolve(framework: str | Framework) -> tuple[Framework, str]:
    """Turn `"auto"` into the framework in use, with the reason.

    A framework the script already imported wins; then whichever is installed,
    PyTorch first. With neither installed the plan is for PyTorch and applies nothing.
    """
    chosen = Framework.parse(framework, name="framework")
    if chosen is not Framework.AUTO:
        return chosen, f"framework={chosen.value!r} requested"
    torch_in, tf_in = is_imported("torch"), is_imported("tensorflow") or is_imported("keras")
    if torch_in != tf_in:
        chosen = Framework.TORCH if torch_in else Framework.TENSORFLOW
        return chosen, f"the script imported {chosen.value}"
    for candidate in (Framework.TORCH, Framework.TENSORFLOW):
        if is_available(candidate.value):
            return candidate, f"{candidate.value} is installed"
    return Framework.TORCH, "neither torch nor tensorflow is installed"


def apply(plan: Plan) -> Plan:
    """Apply `plan` to its framework; the returned plan records each setting's outcome."""
    if plan.framework is Framework.TENSORFLOW:
        from accelkit.frameworks import tensorflow_adapter as adapter
    else:
        from accelkit.frameworks import torch_adapter as adapter  # type: ignore[no-redef]
    return adapter.apply(plan)
