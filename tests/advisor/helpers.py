"""Plain-data measurements for advisor tests: a run measured on `hardware`."""

from __future__ import annotations

from typing import Any

from accelkit.hardware.info import HardwareInfo


def measured_on(hardware: HardwareInfo, **figures: Any) -> dict[str, Any]:
    """A report dict as a run on `hardware` would give (its first GPU, or the CPU)."""
    facts = figures.pop("facts", {})
    device = f"cuda:0 {hardware.gpus[0].name}" if hardware.gpus else "cpu"
    return {
        "framework": figures.pop("framework", "torch"),
        "device": device,
        "hardware": hardware.to_dict(),
        "facts": facts,
        **figures,
    }


def ids(advice: list[Any]) -> list[str]:
    return [a.id for a in advice]
