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


def install_command(name: str, upgrade: bool = False) -> str:
    """The pip command that installs `name` as accelkit needs it.

    Example:
        >>> install_command("keras", upgrade=True)
        "pip install -U 'accelkit[tensorflow]'"
    """
    return f"pip install {'-U ' if upgrade else ''}'accelkit[{_EXTRAS.get(name, name)}]'"


def require(name: str) -> ModuleType:
    """Import `name` or raise ImportError saying how to install it, or how to upgrade it
    when it is older than accelkit supports (`accelkit.utils.versions.FLOORS`)."""
    try:
        module = importlib.import_module(name)
    except ImportError as error:
        raise ImportError(
            f"{name} is not installed; install it with: {install_command(name)}"
        ) from error
    from accelkit.utils.versions import too_old  # packaging, only once a framework is used

    old = too_old(name, str(getattr(module, "__version__", "")) or None)
    if old:
        raise ImportError(f"{old}; upgrade with: {install_command(name, upgrade=True)}")
    return module
