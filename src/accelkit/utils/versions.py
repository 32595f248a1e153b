"""Versions of accelkit, Python and the frameworks, read from installed metadata
(never by importing a framework), and the oldest framework releases accelkit runs on.

`FLOORS` is the one definition of those releases: `accelkit.utils.imports.require`
refuses an older framework with an upgrade hint, `auto_configure` applies nothing to
one, and pyproject.toml's extras declare the same numbers (tests/packaging checks that
they agree). docs/compatibility.md gives the API that sets each floor and its source.

Example:
    >>> at_least("2.5.0+cu121", "2.3"), at_least("2.1.2", "2.3")
    (True, False)
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import platform

from packaging.version import InvalidVersion, Version

from accelkit._version import __version__

# The distributions that make up each framework.
DISTRIBUTIONS = {"torch": ("torch",), "tensorflow": ("tensorflow", "keras")}


@dataclasses.dataclass(frozen=True)
class Floor:
    """The oldest release of a framework accelkit runs on, and the API that sets it."""

    release: str
    api: str


# The oldest release of each framework accelkit runs on: the newest "arrived in" of the
# APIs it calls without a fallback. Feature checks (hasattr) cover what is newer, such as
# PyTorch 2.9's `fp32_precision` TF32 flags (accelkit.hardware.capabilities.TorchTF32).
FLOORS: dict[str, Floor] = {
    "torch": Floor("2.3", "torch.amp.GradScaler(device)"),
    "tensorflow": Floor("2.16", "Keras 3 as TensorFlow's `keras`"),
    "keras": Floor("3.10", "the layer that casts token ids, named in the float-id check"),
}


def parse(version: object) -> Version | None:
    """The release a version string names (``torch.__version__``, ``"2.16.1"``), or
    None when it names none (``"unknown"``, ``""``, None).

    Example:
        >>> parse("2.13.0.dev20260101").release, parse("unknown")
        ((2, 13, 0), None)
    """
    if isinstance(version, Version):
        return version
    if version is None:
        return None
    try:
        return Version(str(version).strip())
    except InvalidVersion:
        return None


def at_least(version: object, floor: str) -> bool | None:
    """Whether `version` is release `floor` or later; None when it names no release.

    Releases are compared without their pre-release, dev and local parts: a nightly
    (``"2.3.0.dev20240301"``) or vendor build (NGC's ``"2.3.0a0+40ec155e58.nv24.03"``)
    of the floor release counts as that release, whose APIs it carries.

    Example:
        >>> at_least("2.3.0a0+40ec155e58.nv24.03", "2.3"), at_least("2.2.2", "2.3")
        (True, False)
    """
    parsed = parse(version)
    if parsed is None:
        return None
    return Version(parsed.base_version) >= Version(floor)


def too_old(name: str, version: str | None = None) -> str | None:
    """Why framework module `name` is older than accelkit runs on, or None when it is
    recent enough, its version is unknown, or accelkit sets it no floor.

    Args:
        name: ``"torch"``, ``"tensorflow"`` or ``"keras"``.
        version: its version (``module.__version__``); default: the installed
            distribution's, read without importing it.

    Example:
        >>> print(too_old("torch", "2.1.2"))
        torch 2.1.2 is older than accelkit supports (torch >= 2.3: torch.amp.GradScaler(device))
    """
    return _too_old(name, installed(name) if version is None else str(version))


@functools.cache  # `require` asks on every call: parse each version once
def _too_old(name: str, version: str | None) -> str | None:
    floor = FLOORS.get(name)
    if floor is None or at_least(version, floor.release) is not False:
        return None
    return (
        f"{name} {version} is older than accelkit supports ({name} >= {floor.release}: {floor.api})"
    )


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
