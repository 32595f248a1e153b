"""The plan's precision inside a PyTorch step: autocast and the gradient scaler.

Applied per step, where the adapter (`accelkit.frameworks.torch_adapter`) applies the
process-wide settings once. `plan.autocast()` and `plan.grad_scaler()` are these two
functions, given to every plan by `accelkit/__init__.py` (a plan imports no framework);
`accelkit.torch.fit` and `Meter` use the same ones. torch is imported on call.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from accelkit.planning.keys import Key
from accelkit.planning.types import Plan
from accelkit.utils.imports import require

if TYPE_CHECKING:
    import torch


def autocast_dtype(plan: Plan) -> Any:
    """The `torch` dtype the plan autocasts to (its `autocast.dtype` setting: bfloat16
    or float16), or None when it computes in float32."""
    name = plan.value(Key.AUTOCAST_DTYPE)
    return None if name is None else getattr(require("torch"), name)


def autocast(plan: Plan, device_type: str | None = None) -> contextlib.AbstractContextManager[Any]:
    """`torch.autocast` in the plan's 16-bit dtype, or a do-nothing context.

    Args:
        plan: the plan in force.
        device_type: ``"cuda"`` or ``"cpu"``; default: cuda when CUDA is available.

    Example:
        >>> import accelkit
        >>> import torch
        >>> plan = accelkit.plan_for(None)                      # no GPU: float32
        >>> model, x, y = torch.nn.Linear(8, 2), torch.randn(4, 8), torch.tensor([0, 1, 1, 0])
        >>> with autocast(plan):
        ...     loss = torch.nn.functional.cross_entropy(model(x), y)
        >>> loss.dtype
        torch.float32
    """
    torch = require("torch")
    dtype = autocast_dtype(plan)
    if dtype is None:
        return contextlib.nullcontext()
    device_type = device_type or ("cuda" if torch.cuda.is_available() else "cpu")
    return torch.autocast(device_type=device_type, dtype=dtype)


def grad_scaler(plan: Plan, device_type: str | None = None) -> torch.amp.GradScaler:
    """A GradScaler that scales only when the plan asks for loss scaling (fp16 plans);
    otherwise its calls pass through.

    Example:
        >>> import accelkit
        >>> import torch
        >>> model = torch.nn.Linear(8, 2)
        >>> optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        >>> grad_scaler(accelkit.plan_for("Tesla T4")).is_enabled()   # fp16: scales
        True
        >>> scaler = grad_scaler(accelkit.plan_for(None))             # fp32: passes through
        >>> scaler.is_enabled()
        False
        >>> loss = model(torch.randn(4, 8)).square().mean()
        >>> scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update()
    """
    torch = require("torch")
    device_type = device_type or ("cuda" if torch.cuda.is_available() else "cpu")
    return torch.amp.GradScaler(device_type, enabled=bool(plan.value(Key.GRAD_SCALER, False)))


def scaler_enabled(scaler: Any) -> bool:
    """True for a GradScaler that scales (one built with ``enabled=False`` does not)."""
    try:
        return bool(scaler.is_enabled())
    except Exception:  # noqa: BLE001 - not a GradScaler: nothing to read
        return False
