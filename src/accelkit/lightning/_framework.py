"""The installed Lightning: `lightning.pytorch`, else `pytorch_lightning`."""

from __future__ import annotations

from types import ModuleType

from accelkit.utils.imports import is_available, require


def lightning_pytorch() -> ModuleType:
    """`lightning.pytorch` when the `lightning` package is installed, else `pytorch_lightning`.

    Raises:
        ImportError: neither is installed (the message says how to install one).
    """
    if is_available("lightning") or not is_available("pytorch_lightning"):
        return require("lightning.pytorch")
    return require("pytorch_lightning")
