"""Versions of accelkit, Python and the frameworks, read from installed metadata
(never by importing a framework)."""

from __future__ import annotations

import importlib.metadata
import platform

from accelkit._version import __version__

# The distributions that make up each framework.
DISTRIBUTIONS = {"torch": ("torch",), "tensorflow": ("tensorflow", "keras")}


def installed(distribution: str) -> str | None:
    """The installed version of `distribution`, or None when it is not installed."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def versions(*frameworks: str) -> dict[str, str | None]:
    """accelkit's and Python's versions, and those of `frameworks`' distributions.

    Example:
        >>> sorted(versions("torch"))
        ['accelkit', 'python', 'torch']
    """
    found: dict[str, str | None] = {"accelkit": __version__, "python": platform.python_version()}
    for framework in frameworks:
        for distribution in DISTRIBUTIONS.get(framework, ()):
            found[distribution] = installed(distribution)
    return found
