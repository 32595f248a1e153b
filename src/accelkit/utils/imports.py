"""Optional frameworks: availability checks and imports with an install hint."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType

_EXTRAS = {"torch": "torch", "tensorflow": "tensorflow", "keras": "tensorflow"}


def is_available(name: str) -> bool:
    """True when `name` can be imported, without importing it."""
    if name in sys.modules:
        return sys.modules[name] is not None  # None: import blocked
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def is_imported(name: str) -> bool:
    return sys.modules.get(name) is not None


def require(name: str) -> ModuleType:
    """Import `name` or raise ImportError saying how to install it."""
    try:
        return importlib.import_module(name)
    except ImportError as error:
        extra = _EXTRAS.get(name, name)
        raise ImportError(
            f"{name} is not installed; install it with: pip install 'accelkit[{extra}]'"
        ) from error
