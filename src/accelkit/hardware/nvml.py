"""Read the GPUs, their links and the driver through NVML (``nvidia-ml-py``).

NVML talks to the driver, not to CUDA: reading it creates no CUDA context, so
a framework imported later still sees a fresh device. Every NVML call is
guarded on its own: a field NVML cannot read stays None with a note, and a
missing library or driver gives an empty, CPU-only reading, never an exception.

This module reads the system and each GPU; `accelkit.hardware.topology` reads
the NVLink links and the pairs, and `accelkit.hardware.nvml_calls` guards the calls.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any, TypeVar

from accelkit.hardware import capabilities, topology
from accelkit.hardware.capabilities import ComputeCapability
from accelkit.hardware.info import GpuInfo, HardwareInfo
from accelkit.hardware.nvml_calls import NvmlCalls, describe_error, normalise_bus_id, text

_T = TypeVar("_T")


def read_gpus(nvml_module: Any = None) -> HardwareInfo:
    """Read every GPU NVML sees, each pair's link, and the driver versions.

    Never raises. Only the NVML part of the snapshot is filled: ``gpus`` (all of
    them, in NVML's PCI order, before CUDA_VISIBLE_DEVICES), ``links``,
    ``driver_version``, ``cuda_driver_version``, ``notes`` and ``source``
    (``"nvml"`` when NVML initialised, ``"none"`` otherwise).

    Args:
        nvml_module: an object with pynvml's functions and constants; tests pass
            a fake. Default: ``import pynvml`` (package ``nvidia-ml-py``).

    Example:
        >>> reading = read_gpus()
        >>> reading.source, [g.name for g in reading.gpus]   # doctest: +SKIP
        ('nvml', ['NVIDIA H200', 'NVIDIA H200'])
    """
    try:
        nvml = nvml_module if nvml_module is not None else _import_pynvml()
    except ImportError as err:
        return HardwareInfo(notes=(f"NVML not available: {_import_reason(err)}",))
    try:
        nvml.nvmlInit()
    except Exception as err:  # noqa: BLE001 - an NVMLError or a broken install: no GPU info
        return HardwareInfo(notes=(f"NVML not available: {describe_error(nvml, err)}",))
    try:
        return _NvmlReader(nvml).read()
    except Exception as err:  # noqa: BLE001 - a bug or an NVML surprise must not cost the run
        note = f"NVML reading failed: {describe_error(nvml, err)}"
        return HardwareInfo(source="nvml", notes=(note,))
    finally:
        with contextlib.suppress(Exception):  # nothing left to do with NVML; the reading stands
            nvml.nvmlShutdown()


def _import_pynvml() -> Any:
    import pynvml

    return pynvml


def _import_reason(err: ImportError) -> str:
    if getattr(err, "name", None) == "pynvml" or "pynvml" in str(err):
        return "the nvidia-ml-py package is not installed (pip install nvidia-ml-py)"
    return f"importing pynvml failed: {err}"


class _NvmlReader:
    """One pass over NVML; collects notes instead of raising."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self._calls = NvmlCalls(nvml)
        # GPU index -> where each active NVLink link goes; None when unreadable
        self._nvlink_targets: dict[int, list[topology.NvLinkTarget] | None] = {}

    def read(self) -> HardwareInfo:
        nvml, call = self._nvml, self._calls.call
        driver = call("", "driver version", lambda: text(nvml.nvmlSystemGetDriverVersion()))
        cuda = call("", "CUDA driver version", self._cuda_driver_version)
        handles = self._handles()
        gpus = [self._gpu(index, handle) for index, handle in handles]
        links = topology.read_links(self._calls, handles, gpus, self._nvlink_targets)
        return HardwareInfo(
            gpus=tuple(gpus),
            links=links,
            driver_version=driver,
            cuda_driver_version=cuda,
            source="nvml",
            notes=self._calls.notes(),
        )

    # -- system ----------------------------------------------------------------

    def _cuda_driver_version(self) -> str:
        read = getattr(self._nvml, "nvmlSystemGetCudaDriverVersion_v2", None)
        version = int(read() if read else self._nvml.nvmlSystemGetCudaDriverVersion())
        # 13000 -> "13.0", 12040 -> "12.4" (CUDA encodes 1000 * major + 10 * minor)
        return f"{version // 1000}.{version % 1000 // 10}"

    def _handles(self) -> list[tuple[int, Any]]:
        nvml, call = self._nvml, self._calls.call
        count = call("", "GPU count", nvml.nvmlDeviceGetCount)
        if count == 0:
            self._calls.note("NVML found no GPUs")
        handles = []
        for index in range(count or 0):
            handle = call(
                str(index),
                "device handle",
                functools.partial(nvml.nvmlDeviceGetHandleByIndex, index),
            )
            if handle is not None:  # a lost GPU is left out; its note says so
                handles.append((index, handle))
        return handles

    # -- one GPU ---------------------------------------------------------------

    def _gpu(self, index: int, handle: Any) -> GpuInfo:
        nvml = self._nvml

        def read(what: str, fn: Callable[[], _T]) -> _T | None:
            return self._calls.call(str(index), what, fn)

        def major_minor() -> ComputeCapability:
            major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
            return int(major), int(minor)

        capability = read("compute capability", major_minor)
        power_mw = read("power limit", lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle))
        memory = read("memory size", lambda: int(nvml.nvmlDeviceGetMemoryInfo(handle).total))
        name = read("name", lambda: text(nvml.nvmlDeviceGetName(handle)))
        mig_slices, mig_uuids = self._mig_devices(index, handle)
        return GpuInfo(
            index=index,
            name=name or "unknown NVIDIA GPU",
            uuid=read("UUID", lambda: text(nvml.nvmlDeviceGetUUID(handle))),
            compute_capability=capability,
            architecture=self._architecture(index, handle, capability),
            memory_bytes=memory,
            memory_bus_width_bits=read(
                "memory bus width", lambda: int(nvml.nvmlDeviceGetMemoryBusWidth(handle))
            ),
            max_memory_clock_mhz=read(
                "max memory clock",
                lambda: int(nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_MEM)),
            ),
            ecc_enabled=self._ecc(index, handle),
            pcie_generation=read(
                "PCIe generation", lambda: int(nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle))
            ),
            pcie_width=read("PCIe width", lambda: int(nvml.nvmlDeviceGetMaxPcieLinkWidth(handle))),
            power_limit_w=None if power_mw is None else power_mw / 1000,
            nvlink_links=self._nvlinks(index, handle),
            mig_enabled=mig_slices is not None,
            mig_slices=tuple(mig_slices or ()),
            mig_uuids=tuple(mig_uuids or ()),
            pci_bus_id=read(
                "PCI bus id", lambda: normalise_bus_id(nvml.nvmlDeviceGetPciInfo(handle).busId)
            ),
        )

    def _architecture(
        self, index: int, handle: Any, capability: ComputeCapability | None
    ) -> str | None:
        from_capability = capabilities.architecture_for(capability)
        try:
            from_nvml = capabilities.NVML_ARCHITECTURES.get(
                int(self._nvml.nvmlDeviceGetArchitecture(handle))
            )
        except Exception:  # noqa: BLE001 - a cross-check; the compute capability is the truth
            from_nvml = None
        if from_capability and from_nvml and from_capability != from_nvml:
            self._calls.note(
                f"GPU {index}: compute capability {capability} says {from_capability}, "
                f"NVML's architecture says {from_nvml}; using {from_capability}"
            )
        return from_capability or from_nvml

    def _ecc(self, index: int, handle: Any) -> bool | None:
        try:
            current, _pending = self._nvml.nvmlDeviceGetEccMode(handle)
        except Exception as err:  # noqa: BLE001 - classified by is_error, recorded otherwise
            if self._calls.is_error(err, "NVML_ERROR_NOT_SUPPORTED"):
                return False  # GeForce and most workstation cards have no ECC to enable
            self._calls.record(str(index), "ECC mode", err)
            return None
        return current == self._nvml.NVML_FEATURE_ENABLED

    def _mig_devices(self, index: int, handle: Any) -> tuple[list[str] | None, list[str]]:
        """The MIG slices' names and UUIDs; names are None when MIG is off."""
        nvml, calls, where = self._nvml, self._calls, str(index)
        try:
            current, _pending = nvml.nvmlDeviceGetMigMode(handle)
        except Exception as err:  # noqa: BLE001 - classified by is_error, recorded otherwise
            if not calls.is_error(err, "NVML_ERROR_NOT_SUPPORTED"):  # most GPUs have no MIG
                calls.record(where, "MIG mode", err)
            return None, []
        if current != nvml.NVML_DEVICE_MIG_ENABLE:
            return None, []
        names: list[str] = []
        uuids: list[str] = []
        slots = calls.call(
            where, "MIG device count", lambda: int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))
        )
        for slot in range(slots or 0):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except Exception as err:  # noqa: BLE001 - classified by is_error, recorded otherwise
                if not calls.is_error(err, "NVML_ERROR_NOT_FOUND", "NVML_ERROR_INVALID_ARGUMENT"):
                    calls.record(where, "MIG devices", err)
                continue  # an empty slot: fewer instances than the maximum
            name = calls.call(
                where, "MIG device name", functools.partial(nvml.nvmlDeviceGetName, mig)
            )
            uuid = calls.call(
                where, "MIG device UUID", functools.partial(nvml.nvmlDeviceGetUUID, mig)
            )
            names.append(text(name) if name is not None else "MIG device")
            uuids.append(text(uuid) if uuid is not None else "")
        return names, uuids

    def _nvlinks(self, index: int, handle: Any) -> int | None:
        """Count the active NVLink links, keeping where each goes for the pairs."""
        targets = topology.read_nvlinks(self._calls, index, handle)
        self._nvlink_targets[index] = targets
        return None if targets is None else len(targets)
