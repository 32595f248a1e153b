"""Read the GPUs, their links and the driver through NVML (``nvidia-ml-py``).

NVML talks to the driver, not to CUDA: reading it creates no CUDA context, so
a framework imported later still sees a fresh device. Every NVML call is
guarded on its own: a field NVML cannot read stays None with a note, and a
missing library or driver gives an empty, CPU-only reading, never an exception.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any, TypeVar

from accelkit.hardware.info import GpuInfo, HardwareInfo, Link

_T = TypeVar("_T")

# NVML's topology levels (nvmlGpuTopologyLevel_t), nearest first.
_TOPOLOGY_LEVELS = {
    0: "internal",  # same board (e.g. a dual-GPU card)
    10: "single",  # one PCIe switch between them (nvidia-smi: PIX)
    20: "multiple",  # several PCIe switches, no host bridge (PXB)
    30: "hostbridge",  # the same PCIe host bridge (PHB)
    40: "node",  # the same NUMA node, across host bridges (NODE)
    50: "system",  # across the CPU interconnect (SYS)
}

# nvmlDeviceGetArchitecture's values, used when the compute capability is unknown.
_NVML_ARCHITECTURES = {
    2: "kepler",
    3: "maxwell",
    4: "pascal",
    5: "volta",
    6: "turing",
    7: "ampere",
    8: "ada",
    9: "hopper",
    10: "blackwell",
    13: "rubin",
}

_NVLINK_DEVICE_TYPE_SWITCH = 2  # NVML_NVLINK_DEVICE_TYPE_SWITCH


def architecture_for(compute_capability: tuple[int, int] | None) -> str | None:
    """The GPU generation for a compute capability, or None when unknown.

    Args:
        compute_capability: ``(major, minor)`` as NVML or CUDA report it.

    Example:
        >>> architecture_for((8, 9))
        'ada'
    """
    if compute_capability is None:
        return None
    major, minor = compute_capability
    if major == 3:
        return "kepler"
    if major == 5:
        return "maxwell"
    if major == 6:
        return "pascal"
    if (major, minor) in ((7, 0), (7, 2)):
        return "volta"
    if (major, minor) == (7, 5):
        return "turing"
    if (major, minor) in ((8, 0), (8, 6), (8, 7)):
        return "ampere"
    if (major, minor) == (8, 9):
        return "ada"
    if (major, minor) == (9, 0):
        return "hopper"
    # 10.x data-centre (B200, GB200), 11.0 Thor (10.1 before CUDA 13), 12.x RTX 50 / GB10.
    if major in (10, 11, 12):
        return "blackwell"
    return None


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
    except Exception as err:  # an NVMLError, or a broken installation: both mean no GPU info
        return HardwareInfo(notes=(f"NVML not available: {_describe(nvml, err)}",))
    try:
        return _NvmlReader(nvml).read()
    except Exception as err:  # a bug or an NVML surprise must not cost the caller the run
        return HardwareInfo(source="nvml", notes=(f"NVML reading failed: {_describe(nvml, err)}",))
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # nothing left to do with NVML; the reading stands
            pass


def _import_pynvml() -> Any:
    import pynvml

    return pynvml


def _import_reason(err: ImportError) -> str:
    if getattr(err, "name", None) == "pynvml" or "pynvml" in str(err):
        return "the nvidia-ml-py package is not installed (pip install nvidia-ml-py)"
    return f"importing pynvml failed: {err}"


def _describe(nvml: Any, err: BaseException) -> str:
    """A readable reason for an NVML error, with a hint for the common ones."""
    try:
        text = str(err)
    except Exception:  # pynvml's __str__ asks the library, which may be the thing missing
        text = f"NVML error {getattr(err, 'value', '?')}"
    code = getattr(err, "value", None)
    if code is not None and code == getattr(nvml, "NVML_ERROR_LIBRARY_NOT_FOUND", object()):
        return f"libnvidia-ml.so.1 not found ({text}); no NVIDIA driver on this machine?"
    if code is not None and code == getattr(nvml, "NVML_ERROR_DRIVER_NOT_LOADED", object()):
        return f"the NVIDIA driver is not loaded ({text})"
    if code is not None and code == getattr(nvml, "NVML_ERROR_NO_PERMISSION", object()):
        return f"no permission to read the GPUs ({text})"
    return text if code is not None else f"{type(err).__name__}: {text}"


def _text(value: Any) -> str:
    """NVML strings come back as bytes from older pynvml releases."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _normalise_bus_id(bus_id: Any) -> str | None:
    """``"00000000:18:00.0"`` and ``"0000:18:00.0"`` name the same device."""
    text = _text(bus_id).strip().lower() if bus_id is not None else ""
    try:
        domain, bus, device_function = text.split(":")
        return f"{int(domain, 16):08x}:{int(bus, 16):02x}:{device_function}"
    except ValueError:
        return text or None


class _NvmlReader:
    """One pass over NVML; collects notes instead of raising."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        # (what, reason) -> where, so eight GPUs failing alike make one note
        self._failures: dict[tuple[str, str], list[str]] = {}
        self._notes: list[str] = []
        # GPU index -> one (remote bus id, remote is an NVSwitch) per active link;
        # None when the links could not be read
        self._nvlink_targets: dict[int, list[tuple[str | None, bool | None]] | None] = {}

    def read(self) -> HardwareInfo:
        nvml = self._nvml
        driver = self._call("", "driver version", lambda: _text(nvml.nvmlSystemGetDriverVersion()))
        cuda = self._call("", "CUDA driver version", self._cuda_driver_version)
        handles = self._handles()
        gpus = [self._gpu(index, handle) for index, handle in handles]
        links = [self._link(gpus, a, b) for a, b in itertools.combinations(handles, 2)]
        return HardwareInfo(
            gpus=tuple(gpus),
            links=tuple(links),
            driver_version=driver,
            cuda_driver_version=cuda,
            source="nvml",
            notes=tuple(self._notes + self._failure_notes()),
        )

    # -- guarded calls ---------------------------------------------------------

    def _call(self, where: str, what: str, read: Callable[[], _T]) -> _T | None:
        """Run one NVML read; on failure record why and return None."""
        try:
            return read()
        except Exception as err:  # NVMLError, or AttributeError from an older pynvml
            self._record(where, what, err)
            return None

    def _record(self, where: str, what: str, err: BaseException) -> None:
        self._failures.setdefault((what, _describe(self._nvml, err)), []).append(where)

    def _is(self, err: BaseException, *names: str) -> bool:
        code = getattr(err, "value", None)
        return code is not None and any(code == getattr(self._nvml, n, object()) for n in names)

    def _failure_notes(self) -> list[str]:
        notes = []
        for (what, reason), places in self._failures.items():
            where = [p for p in places if p]
            on = f" (GPU {', '.join(where)})" if where else ""
            notes.append(f"NVML could not read the {what}{on}: {reason}")
        return notes

    # -- system ----------------------------------------------------------------

    def _cuda_driver_version(self) -> str:
        read = getattr(self._nvml, "nvmlSystemGetCudaDriverVersion_v2", None)
        version = int(read() if read else self._nvml.nvmlSystemGetCudaDriverVersion())
        # 13000 -> "13.0", 12040 -> "12.4" (CUDA encodes 1000 * major + 10 * minor)
        return f"{version // 1000}.{version % 1000 // 10}"

    def _handles(self) -> list[tuple[int, Any]]:
        nvml = self._nvml
        count = self._call("", "GPU count", nvml.nvmlDeviceGetCount)
        if count == 0:
            self._notes.append("NVML found no GPUs")
        handles = []
        for index in range(count or 0):
            handle = self._call(
                str(index), "device handle", lambda i=index: nvml.nvmlDeviceGetHandleByIndex(i)
            )
            if handle is not None:  # a lost GPU is left out; its note says so
                handles.append((index, handle))
        return handles

    # -- one GPU ---------------------------------------------------------------

    def _gpu(self, index: int, handle: Any) -> GpuInfo:
        nvml = self._nvml

        def read(what: str, fn: Callable[[], _T]) -> _T | None:
            return self._call(str(index), what, fn)

        capability = read(
            "compute capability",
            lambda: tuple(int(v) for v in nvml.nvmlDeviceGetCudaComputeCapability(handle)),
        )
        power_mw = read("power limit", lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle))
        memory = read("memory size", lambda: int(nvml.nvmlDeviceGetMemoryInfo(handle).total))
        name = read("name", lambda: _text(nvml.nvmlDeviceGetName(handle)))
        mig_slices, mig_uuids = self._mig_devices(index, handle)
        return GpuInfo(
            index=index,
            name=name or "unknown NVIDIA GPU",
            uuid=read("UUID", lambda: _text(nvml.nvmlDeviceGetUUID(handle))),
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
                "PCI bus id", lambda: _normalise_bus_id(nvml.nvmlDeviceGetPciInfo(handle).busId)
            ),
        )

    def _architecture(
        self, index: int, handle: Any, capability: tuple[int, int] | None
    ) -> str | None:
        from_capability = architecture_for(capability)
        try:
            from_nvml = _NVML_ARCHITECTURES.get(int(self._nvml.nvmlDeviceGetArchitecture(handle)))
        except Exception:  # only a cross-check; the compute capability is the source of truth
            from_nvml = None
        if from_capability and from_nvml and from_capability != from_nvml:
            self._notes.append(
                f"GPU {index}: compute capability {capability} says {from_capability}, "
                f"NVML's architecture says {from_nvml}; using {from_capability}"
            )
        return from_capability or from_nvml

    def _ecc(self, index: int, handle: Any) -> bool | None:
        try:
            current, _pending = self._nvml.nvmlDeviceGetEccMode(handle)
        except Exception as err:
            if self._is(err, "NVML_ERROR_NOT_SUPPORTED"):
                return False  # GeForce and most workstation cards have no ECC to enable
            self._record(str(index), "ECC mode", err)
            return None
        return current == self._nvml.NVML_FEATURE_ENABLED

    def _mig_devices(self, index: int, handle: Any) -> tuple[list[str] | None, list[str]]:
        """The MIG slices' names and UUIDs; names are None when MIG is off."""
        nvml, where = self._nvml, str(index)
        try:
            current, _pending = nvml.nvmlDeviceGetMigMode(handle)
        except Exception as err:
            if not self._is(err, "NVML_ERROR_NOT_SUPPORTED"):  # most GPUs have no MIG: no note
                self._record(where, "MIG mode", err)
            return None, []
        if current != nvml.NVML_DEVICE_MIG_ENABLE:
            return None, []
        names: list[str] = []
        uuids: list[str] = []
        slots = self._call(
            where, "MIG device count", lambda: int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))
        )
        for slot in range(slots or 0):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except Exception as err:
                if not self._is(err, "NVML_ERROR_NOT_FOUND", "NVML_ERROR_INVALID_ARGUMENT"):
                    self._record(where, "MIG devices", err)
                continue  # an empty slot: fewer instances than the maximum
            name = self._call(where, "MIG device name", lambda: nvml.nvmlDeviceGetName(mig))
            uuid = self._call(where, "MIG device UUID", lambda: nvml.nvmlDeviceGetUUID(mig))
            names.append(_text(name) if name is not None else "MIG device")
            uuids.append(_text(uuid) if uuid is not None else "")
        return names, uuids

    def _nvlinks(self, index: int, handle: Any) -> int | None:
        """Count active NVLink links and remember where each one goes.

        NVML has no link count; links are probed from 0 until NVML says the link
        does not exist (NOT_SUPPORTED on a GPU without NVLink, INVALID_ARGUMENT
        past the last link).
        """
        nvml = self._nvml
        targets: list[tuple[str | None, bool | None]] = []
        for link in range(int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))):
            try:
                active = nvml.nvmlDeviceGetNvLinkState(handle, link)
            except Exception as err:
                if self._is(err, "NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_INVALID_ARGUMENT"):
                    break
                self._record(str(index), "NVLink state", err)
                self._nvlink_targets[index] = None
                return None
            if active == nvml.NVML_FEATURE_ENABLED:
                targets.append(self._nvlink_target(handle, link))
        self._nvlink_targets[index] = targets
        return len(targets)

    def _nvlink_target(self, handle: Any, link: int) -> tuple[str | None, bool | None]:
        """(remote PCI bus id, remote is an NVSwitch) for one active link; None: unknown."""
        nvml = self._nvml
        switch = getattr(nvml, "NVML_NVLINK_DEVICE_TYPE_SWITCH", _NVLINK_DEVICE_TYPE_SWITCH)
        try:
            is_switch = nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link) == switch
        except Exception:  # older drivers: a GPU's bus id still identifies a direct link
            is_switch = None
        try:
            remote = nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link)
            bus_id = _normalise_bus_id(remote.busId)
        except Exception:
            bus_id = None
        return bus_id, is_switch

    # -- one pair --------------------------------------------------------------

    def _link(self, gpus: list[GpuInfo], first: tuple[int, Any], second: tuple[int, Any]) -> Link:
        nvml = self._nvml
        (a, handle_a), (b, handle_b) = first, second
        where = f"{a}-{b}"
        # pynvml defines NVML_P2P_CAPS_INDEX_READ as `0,` (a tuple); ctypes needs the int
        read_index = nvml.NVML_P2P_CAPS_INDEX_READ
        read_index = read_index[0] if isinstance(read_index, tuple) else read_index
        status = self._call(
            where, "P2P status", lambda: nvml.nvmlDeviceGetP2PStatus(handle_a, handle_b, read_index)
        )
        level = self._call(
            where, "topology", lambda: nvml.nvmlDeviceGetTopologyCommonAncestor(handle_a, handle_b)
        )
        nvlink = self._nvlink_between(gpus, a, b)
        if nvlink:
            ancestor: str | None = "nvlink"
        else:
            ancestor = None if level is None else _TOPOLOGY_LEVELS.get(int(level))
        return Link(
            a=a,
            b=b,
            p2p=None if status is None else status == nvml.NVML_P2P_STATUS_OK,
            nvlink=nvlink,
            common_ancestor=ancestor,
        )

    def _nvlink_between(self, gpus: list[GpuInfo], a: int, b: int) -> bool | None:
        """Whether NVLink joins GPUs `a` and `b`.

        True when an active link of one reaches the other's PCI bus id, or when
        both have links to NVSwitches (switches are taken as one fabric, as on
        HGX/DGX boards). False when either has no active link, or when every far
        end is known and none joins them. None when a link's state, or whether
        its far end is a switch, could not be read.
        """
        targets_a, targets_b = self._nvlink_targets.get(a), self._nvlink_targets.get(b)
        if targets_a == [] or targets_b == []:
            return False
        if targets_a is None or targets_b is None:
            return None
        bus_ids = {g.index: g.pci_bus_id for g in gpus}
        if any(bus == bus_ids[b] for bus, _ in targets_a if bus):
            return True
        if any(bus == bus_ids[a] for bus, _ in targets_b if bus):
            return True
        if any(switch for _, switch in targets_a) and any(switch for _, switch in targets_b):
            return True
        if bus_ids[a] is None or bus_ids[b] is None:
            return None

        def unresolved(bus: str | None, switch: bool | None) -> bool:
            if switch:
                return False
            # a GPU's far end is named by its bus id; an unknown type or no bus id is a guess
            return bus is None or (switch is None and bus not in bus_ids.values())

        return None if any(unresolved(*t) for t in targets_a + targets_b) else False
