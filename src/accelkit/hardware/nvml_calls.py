"""NVML calls made one at a time, each failure kept as a note instead of raised.

The NVML reader (`accelkit.hardware.nvml`) and the link reader
(`accelkit.hardware.topology`) share one `NvmlCalls` per pass, so the same
failure on eight GPUs makes one note, and both speak of errors alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

_T = TypeVar("_T")


def describe_error(nvml: Any, err: BaseException) -> str:
    """A readable reason for an NVML error, with a hint for the common ones.

    Args:
        nvml: the pynvml module (or a fake), for its error codes.
        err: what an NVML call raised.
    """
    try:
        text = str(err)
    except Exception:  # noqa: BLE001 - pynvml's __str__ asks the library, which may be missing
        text = f"NVML error {getattr(err, 'value', '?')}"
    code = getattr(err, "value", None)
    if code is not None and code == getattr(nvml, "NVML_ERROR_LIBRARY_NOT_FOUND", object()):
        return f"libnvidia-ml.so.1 not found ({text}); no NVIDIA driver on this machine?"
    if code is not None and code == getattr(nvml, "NVML_ERROR_DRIVER_NOT_LOADED", object()):
        return f"the NVIDIA driver is not loaded ({text})"
    if code is not None and code == getattr(nvml, "NVML_ERROR_NO_PERMISSION", object()):
        return f"no permission to read the GPUs ({text})"
    return text if code is not None else f"{type(err).__name__}: {text}"


def text(value: Any) -> str:
    """NVML strings come back as bytes from older pynvml releases."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def normalise_bus_id(bus_id: Any) -> str | None:
    """``"00000000:18:00.0"`` and ``"0000:18:00.0"`` name the same device.

    Example:
        >>> normalise_bus_id(b"0000:18:00.0")
        '00000000:18:00.0'
    """
    value = text(bus_id).strip().lower() if bus_id is not None else ""
    try:
        domain, bus, device_function = value.split(":")
        return f"{int(domain, 16):08x}:{int(bus, 16):02x}:{device_function}"
    except ValueError:
        return value or None


class NvmlCalls:
    """One pass over NVML: guarded calls, and the notes they leave.

    Args:
        nvml: the pynvml module (or a fake with its functions and constants).

    Example:
        >>> calls = NvmlCalls(nvml=None)
        >>> calls.call("0", "power limit", [].pop) is None
        True
        >>> calls.notes()
        ('NVML could not read the power limit (GPU 0): IndexError: pop from empty list',)
    """

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        # (what, reason) -> where, so eight GPUs failing alike make one note
        self._failures: dict[tuple[str, str], list[str]] = {}
        self._notes: list[str] = []

    def call(self, where: str, what: str, read: Callable[[], _T]) -> _T | None:
        """Run one NVML read; on failure record why and return None.

        Args:
            where: the GPU index (``"3"``), pair (``"0-1"``) or ``""`` for the system.
            what: the field, as the note names it (``"power limit"``).
            read: the call itself.
        """
        try:
            return read()
        except Exception as err:  # noqa: BLE001 - NVMLError, or AttributeError (older pynvml)
            self.record(where, what, err)
            return None

    def record(self, where: str, what: str, err: BaseException) -> None:
        """Note that reading `what` on `where` failed with `err`."""
        self._failures.setdefault((what, describe_error(self.nvml, err)), []).append(where)

    def note(self, message: str) -> None:
        """Keep a note that is no failed call (a disagreement, an empty machine)."""
        self._notes.append(message)

    def is_error(self, err: BaseException, *names: str) -> bool:
        """True when `err` carries one of the NVML error codes named, e.g.
        ``"NVML_ERROR_NOT_SUPPORTED"``."""
        code = getattr(err, "value", None)
        return code is not None and any(code == getattr(self.nvml, n, object()) for n in names)

    def notes(self) -> tuple[str, ...]:
        """The plain notes, then one per kind of failure with the GPUs it hit."""
        failures = []
        for (what, reason), places in self._failures.items():
            where = [p for p in places if p]
            on = f" (GPU {', '.join(where)})" if where else ""
            failures.append(f"NVML could not read the {what}{on}: {reason}")
        return tuple(self._notes + failures)
