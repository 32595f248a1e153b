"""What is here: GPUs, their links, the driver, the host and the launcher.

`detect()` builds a `HardwareInfo` snapshot from NVML and the environment. It
never initialises CUDA and never raises: without a GPU, a driver or NVML it
returns a CPU-only snapshot whose ``notes`` say why.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from accelkit.hardware import environment, framework_builds, visible_devices
from accelkit.hardware.info import FrameworkBuild, GpuInfo, HardwareInfo, LauncherEnv, Link
from accelkit.hardware.nvml import read_gpus

__all__ = ["FrameworkBuild", "GpuInfo", "HardwareInfo", "LauncherEnv", "Link", "detect"]


def detect(*, environ: Mapping[str, str] | None = None) -> HardwareInfo:
    """Take a snapshot of this machine's GPUs, host and launcher.

    Reads NVML (no CUDA context is created, so frameworks imported afterwards
    are unaffected), then keeps the GPUs CUDA_VISIBLE_DEVICES leaves visible,
    in CUDA's order, with the links between them, and what the installed frameworks
    were built for (``frameworks``: can they use those GPUs at all?). Never raises: anything that
    cannot be read is None or absent, with the reason in ``notes``.

    Args:
        environ: the environment to read launcher variables from; default
            ``os.environ``.

    Returns:
        A `HardwareInfo` with ``source="nvml"`` when NVML answered, else
        ``source="none"`` and no GPUs.

    Example:
        >>> import accelkit
        >>> info = accelkit.detect()
        >>> [(g.name, g.compute_capability) for g in info.gpus]   # doctest: +SKIP
        [('NVIDIA H100 80GB HBM3', (9, 0)), ('NVIDIA H100 80GB HBM3', (9, 0))]
        >>> info.all_nvlink, info.notes                            # doctest: +SKIP
        (True, ())
    """
    try:
        return _detect(os.environ if environ is None else environ)
    except Exception as err:  # noqa: BLE001 - detection is advisory; it never stops a run
        return HardwareInfo(
            source="none",
            notes=(f"hardware detection failed unexpectedly: {type(err).__name__}: {err}",),
        )


def _detect(environ: Mapping[str, str]) -> HardwareInfo:
    reading = read_gpus()
    notes = list(reading.notes)
    launcher = environment.read_launcher(environ, notes)
    order_note = visible_devices.device_order_note(reading.gpus, environ)
    if order_note:
        notes.append(order_note)
    gpus = visible_devices.visible(reading.gpus, launcher.cuda_visible_devices, notes)
    shown = {g.index for g in gpus}
    return dataclasses.replace(
        reading,
        # can the frameworks use them? (without GPUs the question does not arise)
        frameworks=framework_builds.read_all() if gpus else (),
        gpus=gpus,
        links=tuple(link for link in reading.links if link.a in shown and link.b in shown),
        cpu_count=environment.cpu_count(),
        host_memory_bytes=environment.host_memory_bytes(),
        infiniband=environment.has_infiniband(),
        launcher=launcher,
        notes=tuple(notes),
    )
