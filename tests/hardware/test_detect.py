"""`accelkit.hardware.detect` and the NVML reader, against a fake NVML.

The fake implements the handful of pynvml functions the reader calls, with
pynvml's constants and error hierarchy (values copied from nvidia-ml-py), so
machines we don't have can be described in a few lines.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from accelkit.hardware import HardwareInfo, Link, detect, nvml
from accelkit.hardware.nvml import architecture_for, read_gpus

SRC = Path(__file__).resolve().parents[2] / "src"
GIB = 1024**3

# -- a fake pynvml ---------------------------------------------------------------


class NVMLError(Exception):
    """pynvml's base error: `value` is the NVML return code."""

    _strings = {
        2: "Invalid Argument",
        3: "Not Supported",
        4: "Insufficient Permissions",
        6: "Not Found",
        9: "Driver Not Loaded",
        12: "NVML Shared Library Not Found",
        15: "GPU is lost",
        999: "Unknown Error",
    }

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return self._strings.get(self.value, f"NVML error {self.value}")


def _error_class(name: str, code: int) -> type[NVMLError]:
    return type(name, (NVMLError,), {"__init__": lambda self: NVMLError.__init__(self, code)})


@dataclasses.dataclass
class FakeGpu:
    name: str
    uuid: str
    bus_id: str
    capability: tuple[int, int]
    architecture: int  # NVML_DEVICE_ARCH_*
    memory_bytes: int
    bus_width: int
    memory_clock_mhz: int
    power_mw: int
    pcie: tuple[int, int] = (4, 16)
    ecc: bool | None = True  # None: NOT_SUPPORTED, like GeForce cards
    # one entry per NVLink link: None inactive, else (remote device type, remote bus id)
    nvlinks: list[tuple[int, str] | None] = dataclasses.field(default_factory=list)
    mig: list[tuple[str, str]] | None = None  # None: MIG not supported; [] supported, off


class FakeNvml:
    """A stand-in for the `pynvml` module. `fail` maps a function name to
    (error code, GPU indices it fails on, or None for every call)."""

    NVMLError = NVMLError
    NVML_ERROR_INVALID_ARGUMENT = 2
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_NO_PERMISSION = 4
    NVML_ERROR_NOT_FOUND = 6
    NVML_ERROR_DRIVER_NOT_LOADED = 9
    NVML_ERROR_LIBRARY_NOT_FOUND = 12
    NVML_ERROR_GPU_IS_LOST = 15
    NVML_ERROR_UNKNOWN = 999
    NVMLError_InvalidArgument = _error_class("NVMLError_InvalidArgument", 2)
    NVMLError_NotSupported = _error_class("NVMLError_NotSupported", 3)
    NVMLError_NotFound = _error_class("NVMLError_NotFound", 6)
    NVMLError_DriverNotLoaded = _error_class("NVMLError_DriverNotLoaded", 9)
    NVMLError_LibraryNotFound = _error_class("NVMLError_LibraryNotFound", 12)
    NVMLError_Unknown = _error_class("NVMLError_Unknown", 999)

    NVML_FEATURE_DISABLED = 0
    NVML_FEATURE_ENABLED = 1
    NVML_CLOCK_MEM = 2
    NVML_NVLINK_MAX_LINKS = 18
    NVML_NVLINK_DEVICE_TYPE_GPU = 0
    NVML_NVLINK_DEVICE_TYPE_SWITCH = 2
    NVML_P2P_CAPS_INDEX_READ = (0,)  # sic: pynvml writes `= 0,`
    NVML_P2P_STATUS_OK = 0
    NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED = 1
    NVML_P2P_STATUS_GPU_NOT_SUPPORTED = 2
    NVML_P2P_STATUS_NOT_SUPPORTED = 5
    NVML_TOPOLOGY_SINGLE = 10
    NVML_TOPOLOGY_HOSTBRIDGE = 30
    NVML_TOPOLOGY_NODE = 40
    NVML_TOPOLOGY_SYSTEM = 50
    NVML_DEVICE_MIG_DISABLE = 0
    NVML_DEVICE_MIG_ENABLE = 1

    def __init__(
        self,
        gpus: list[FakeGpu],
        *,
        p2p: Callable[[int, int], int] = lambda a, b: 0,
        topology: Callable[[int, int], int] = lambda a, b: 50,
        mig_enabled: bool = False,
        fail: dict[str, tuple[int, set[int] | None]] | None = None,
        init_error: int | None = None,
        driver: str = "580.95.05",
        cuda: int = 13000,
    ) -> None:
        self.gpus, self.p2p, self.topology = gpus, p2p, topology
        self.mig_enabled, self.init_error = mig_enabled, init_error
        self.driver, self.cuda = driver, cuda
        self.calls: list[str] = []
        for name, (code, only) in (fail or {}).items():
            setattr(self, name, self._failing(getattr(self, name), code, only))

    @staticmethod
    def _failing(
        original: Callable[..., Any], code: int, only: set[int] | None
    ) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            if only is None or (args and args[0][1] in only):
                raise NVMLError(code)
            return original(*args)

        return call

    def _gpu(self, handle: tuple[str, int]) -> FakeGpu:
        return self.gpus[handle[1]]

    # system
    def nvmlInit(self) -> None:
        self.calls.append("init")
        if self.init_error is not None:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.calls.append("shutdown")

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return self.cuda

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> tuple[str, int]:
        return ("gpu", index)

    # one device (a MIG handle is ("mig", gpu, slot))
    def nvmlDeviceGetName(self, handle: tuple) -> str:
        if handle[0] == "mig":
            return self.gpus[handle[1]].mig[handle[2]][0]
        return self._gpu(handle).name

    def nvmlDeviceGetUUID(self, handle: tuple) -> str:
        if handle[0] == "mig":
            return self.gpus[handle[1]].mig[handle[2]][1]
        return self._gpu(handle).uuid

    def nvmlDeviceGetPciInfo(self, handle: tuple) -> SimpleNamespace:
        return SimpleNamespace(busId=self._gpu(handle).bus_id)

    def nvmlDeviceGetCudaComputeCapability(self, handle: tuple) -> tuple[int, int]:
        return self._gpu(handle).capability

    def nvmlDeviceGetArchitecture(self, handle: tuple) -> int:
        return self._gpu(handle).architecture

    def nvmlDeviceGetMemoryInfo(self, handle: tuple) -> SimpleNamespace:
        return SimpleNamespace(total=self._gpu(handle).memory_bytes, free=0, used=0)

    def nvmlDeviceGetMemoryBusWidth(self, handle: tuple) -> int:
        return self._gpu(handle).bus_width

    def nvmlDeviceGetMaxClockInfo(self, handle: tuple, clock: int) -> int:
        assert clock == self.NVML_CLOCK_MEM
        return self._gpu(handle).memory_clock_mhz

    def nvmlDeviceGetEccMode(self, handle: tuple) -> list[int]:
        ecc = self._gpu(handle).ecc
        if ecc is None:
            raise self.NVMLError_NotSupported()
        return [int(ecc), int(ecc)]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: tuple) -> int:
        return self._gpu(handle).pcie[0]

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: tuple) -> int:
        return self._gpu(handle).pcie[1]

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: tuple) -> int:
        return self._gpu(handle).power_mw

    def nvmlDeviceGetNvLinkState(self, handle: tuple, link: int) -> int:
        links = self._gpu(handle).nvlinks
        if not links:
            raise self.NVMLError_NotSupported()
        if link >= len(links):
            raise self.NVMLError_InvalidArgument()
        return int(links[link] is not None)

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: tuple, link: int) -> int:
        return self._gpu(handle).nvlinks[link][0]

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: tuple, link: int) -> SimpleNamespace:
        return SimpleNamespace(busId=self._gpu(handle).nvlinks[link][1])

    def nvmlDeviceGetMigMode(self, handle: tuple) -> list[int]:
        if self._gpu(handle).mig is None:
            raise self.NVMLError_NotSupported()
        mode = int(self.mig_enabled)
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: tuple) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: tuple, slot: int) -> tuple:
        if slot >= len(self._gpu(handle).mig):
            raise self.NVMLError_NotFound()
        return ("mig", handle[1], slot)

    # pairs
    def nvmlDeviceGetP2PStatus(self, first: tuple, second: tuple, index: int) -> int:
        assert index == 0, "the reader must unwrap pynvml's tuple constant"
        return self.p2p(first[1], second[1])

    def nvmlDeviceGetTopologyCommonAncestor(self, first: tuple, second: tuple) -> int:
        return self.topology(first[1], second[1])


GPU, SWITCH = FakeNvml.NVML_NVLINK_DEVICE_TYPE_GPU, FakeNvml.NVML_NVLINK_DEVICE_TYPE_SWITCH


def _bus(index: int) -> str:
    return f"00000000:{0x18 + 0x10 * index:02X}:00.0"


def h100_pair() -> FakeNvml:
    """Two H100 NVL cards joined by NVLink bridges (6 links each way)."""
    gpus = [
        FakeGpu(
            name="NVIDIA H100 NVL",
            uuid=f"GPU-{i}h100-0000-0000-0000-000000000000",
            bus_id=_bus(i),
            capability=(9, 0),
            architecture=9,
            memory_bytes=94 * GIB,
            bus_width=6144,
            memory_clock_mhz=2619,
            power_mw=400_000,
            pcie=(5, 16),
            nvlinks=[(GPU, _bus(1 - i))] * 6 + [None] * 12,
            mig=[],
        )
        for i in range(2)
    ]
    return FakeNvml(gpus, topology=lambda a, b: 40)


def rtx4090_box() -> FakeNvml:
    """Four GeForce RTX 4090: no NVLink, no ECC, no MIG, P2P disabled by the driver."""
    gpus = [
        FakeGpu(
            name="NVIDIA GeForce RTX 4090",
            uuid=f"GPU-{i}4090-aaaa-bbbb-cccc-dddddddddddd",
            bus_id=_bus(i),
            capability=(8, 9),
            architecture=8,
            memory_bytes=24 * GIB,
            bus_width=384,
            memory_clock_mhz=10501,
            power_mw=450_000,
            ecc=None,
        )
        for i in range(4)
    ]
    return FakeNvml(
        gpus,
        p2p=lambda a, b: FakeNvml.NVML_P2P_STATUS_GPU_NOT_SUPPORTED,
        topology=lambda a, b: 40 if a // 2 == b // 2 else 50,
    )


def hgx_h100(count: int = 4, *, remote_type_readable: bool = True) -> FakeNvml:
    """H100 SXM GPUs whose 18 links all go to NVSwitches."""
    gpus = [
        FakeGpu(
            name="NVIDIA H100 80GB HBM3",
            uuid=f"GPU-{i}sxm0-0000-0000-0000-000000000000",
            bus_id=_bus(i),
            capability=(9, 0),
            architecture=9,
            memory_bytes=80 * GIB,
            bus_width=5120,
            memory_clock_mhz=2619,
            power_mw=700_000,
            pcie=(5, 16),
            # what a real HGX H200 reports: type SWITCH, and no PCI address for the switch
            nvlinks=[(SWITCH, "FFFFFFFF:FF:FF.0")] * 18,
            mig=[],
        )
        for i in range(count)
    ]
    fail = {} if remote_type_readable else {"nvmlDeviceGetNvLinkRemoteDeviceType": (3, None)}
    return FakeNvml(gpus, topology=lambda a, b: 50, fail=fail)


def a100_mig() -> FakeNvml:
    """One A100 split into three MIG slices."""
    slices = [
        ("NVIDIA A100-SXM4-40GB MIG 3g.20gb", "MIG-11111111-aaaa-bbbb-cccc-000000000001"),
        ("NVIDIA A100-SXM4-40GB MIG 2g.10gb", "MIG-22222222-aaaa-bbbb-cccc-000000000002"),
        ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", "MIG-33333333-aaaa-bbbb-cccc-000000000003"),
    ]
    gpu = FakeGpu(
        name="NVIDIA A100-SXM4-40GB",
        uuid="GPU-a100a100-0000-0000-0000-000000000000",
        bus_id=_bus(0),
        capability=(8, 0),
        architecture=7,
        memory_bytes=40 * GIB,
        bus_width=5120,
        memory_clock_mhz=1215,
        power_mw=400_000,
        mig=slices,
    )
    return FakeNvml([gpu], mig_enabled=True)


@pytest.fixture
def use_nvml(monkeypatch: pytest.MonkeyPatch) -> Callable[[Any], None]:
    """Make `import pynvml` inside the reader return the given fake (None: not installed)."""

    def install(module: Any) -> None:
        monkeypatch.setitem(sys.modules, "pynvml", module)

    return install


# -- machines --------------------------------------------------------------------


def test_h100_pair_with_nvlink_bridges() -> None:
    fake = h100_pair()
    info = read_gpus(fake)

    assert info.source == "nvml" and info.notes == ()
    assert info.driver_version == "580.95.05" and info.cuda_driver_version == "13.0"
    first = info.gpus[0]
    assert first.name == "NVIDIA H100 NVL"
    assert first.compute_capability == (9, 0) and first.architecture == "hopper"
    assert first.memory_bytes == 94 * GIB
    assert first.ecc_enabled is True
    assert (first.pcie_generation, first.pcie_width) == (5, 16)
    assert first.power_limit_w == 400.0
    assert first.nvlink_links == 6
    assert first.mig_enabled is False and first.mig_slices == ()
    assert first.pci_bus_id == "00000000:18:00.0"
    assert first.memory_bandwidth_gbps == pytest.approx(4023, rel=0.01)
    assert info.links == (Link(a=0, b=1, p2p=True, nvlink=True, common_ancestor="nvlink"),)
    assert info.all_peers_reachable and info.all_nvlink
    assert fake.calls == ["init", "shutdown"]


def test_rtx4090_box_without_p2p_or_nvlink() -> None:
    info = read_gpus(rtx4090_box())

    assert info.notes == ()  # no ECC, NVLink or MIG on GeForce is normal, not worth a note
    assert [g.index for g in info.gpus] == [0, 1, 2, 3]
    assert all(g.architecture == "ada" and g.compute_capability == (8, 9) for g in info.gpus)
    assert all(g.ecc_enabled is False and g.nvlink_links == 0 for g in info.gpus)
    assert all(not g.mig_enabled for g in info.gpus)
    assert info.gpus[0].memory_bandwidth_gbps == pytest.approx(1008, rel=0.01)
    assert len(info.links) == 6
    assert all(link.p2p is False and link.nvlink is False for link in info.links)
    assert {(l.a, l.b): l.common_ancestor for l in info.links}[(0, 1)] == "node"
    assert {(l.a, l.b): l.common_ancestor for l in info.links}[(1, 2)] == "system"
    assert info.all_peers_reachable is False and not info.all_nvlink


def test_gpus_behind_nvswitches_are_all_connected() -> None:
    info = read_gpus(hgx_h100(4))

    assert all(g.nvlink_links == 18 for g in info.gpus)
    assert len(info.links) == 6 and info.all_nvlink
    assert {link.common_ancestor for link in info.links} == {"nvlink"}


def test_nvlink_to_an_unidentified_device_is_unknown_not_guessed() -> None:
    info = read_gpus(hgx_h100(2, remote_type_readable=False))

    assert info.gpus[0].nvlink_links == 18
    assert info.links[0].nvlink is None
    assert info.links[0].common_ancestor == "system"  # NVML's PCIe topology still reported


def test_mig_enabled_a100_lists_its_slices() -> None:
    info = read_gpus(a100_mig())

    (gpu,) = info.gpus
    assert gpu.architecture == "ampere" and gpu.mig_enabled
    assert gpu.mig_slices == (
        "NVIDIA A100-SXM4-40GB MIG 3g.20gb",
        "NVIDIA A100-SXM4-40GB MIG 2g.10gb",
        "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
    )
    assert gpu.mig_uuids[0] == "MIG-11111111-aaaa-bbbb-cccc-000000000001"
    assert info.mig_enabled and info.links == ()


def test_mig_capable_gpu_with_mig_off() -> None:
    fake = a100_mig()
    fake.mig_enabled = False
    (gpu,) = read_gpus(fake).gpus
    assert not gpu.mig_enabled and gpu.mig_slices == ()


# -- NVML missing or failing -------------------------------------------------------


def test_pynvml_not_installed(use_nvml: Callable[[Any], None]) -> None:
    use_nvml(None)  # `import pynvml` raises ImportError

    info = read_gpus()

    assert info.source == "none" and info.gpus == ()
    assert info.notes == (
        "NVML not available: the nvidia-ml-py package is not installed (pip install nvidia-ml-py)",
    )


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (FakeNvml.NVML_ERROR_LIBRARY_NOT_FOUND, "libnvidia-ml.so.1 not found"),
        (FakeNvml.NVML_ERROR_DRIVER_NOT_LOADED, "the NVIDIA driver is not loaded"),
    ],
)
def test_nvml_init_failure_gives_cpu_only_snapshot(code: int, expected: str) -> None:
    fake = FakeNvml([], init_error=code)

    info = read_gpus(fake)

    assert info.source == "none" and info.gpus == ()
    assert len(info.notes) == 1 and info.notes[0].startswith(f"NVML not available: {expected}")
    assert fake.calls == ["init"]  # no shutdown without a successful init


def test_one_failing_call_leaves_one_field_empty() -> None:
    fake = rtx4090_box()
    fake = FakeNvml(
        fake.gpus,
        p2p=fake.p2p,
        fail={"nvmlDeviceGetMemoryBusWidth": (FakeNvml.NVML_ERROR_UNKNOWN, {1, 3})},
    )

    info = read_gpus(fake)

    assert [g.memory_bus_width_bits for g in info.gpus] == [384, None, 384, None]
    assert info.gpus[1].memory_bandwidth_gbps is None
    assert info.gpus[1].name == "NVIDIA GeForce RTX 4090" and info.gpus[1].memory_bytes == 24 * GIB
    assert info.notes == ("NVML could not read the memory bus width (GPU 1, 3): Unknown Error",)
    assert len(info.links) == 6


def test_failing_pair_and_system_calls_are_noted() -> None:
    fake = h100_pair()
    fake = FakeNvml(
        fake.gpus,
        fail={
            "nvmlDeviceGetP2PStatus": (FakeNvml.NVML_ERROR_NO_PERMISSION, None),
            "nvmlSystemGetCudaDriverVersion_v2": (FakeNvml.NVML_ERROR_UNKNOWN, None),
        },
    )

    info = read_gpus(fake)

    assert info.links[0].p2p is None and info.links[0].nvlink is True
    assert info.cuda_driver_version is None and info.driver_version == "580.95.05"
    assert any("P2P status (GPU 0-1)" in note for note in info.notes)
    assert "NVML could not read the CUDA driver version: Unknown Error" in info.notes


def test_lost_gpu_is_left_out_with_a_note() -> None:
    fake = rtx4090_box()
    fake = FakeNvml(
        fake.gpus, fail={"nvmlDeviceGetHandleByIndex": (FakeNvml.NVML_ERROR_GPU_IS_LOST, None)}
    )

    info = read_gpus(fake)

    assert info.gpus == () and info.source == "nvml"
    assert info.notes == ("NVML could not read the device handle (GPU 0, 1, 2, 3): GPU is lost",)


def test_unexpected_error_still_shuts_nvml_down(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = h100_pair()

    def explode(self: Any) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(nvml._NvmlReader, "read", explode)
    info = read_gpus(fake)

    assert info.gpus == () and info.notes == ("NVML reading failed: RuntimeError: boom",)
    assert fake.calls == ["init", "shutdown"]


def test_cuda_driver_version_formatting() -> None:
    fake = h100_pair()
    fake.cuda = 12040
    assert read_gpus(fake).cuda_driver_version == "12.4"


@pytest.mark.parametrize(
    ("capability", "architecture"),
    [
        ((6, 1), "pascal"),
        ((7, 0), "volta"),
        ((7, 2), "volta"),
        ((7, 5), "turing"),
        ((8, 0), "ampere"),
        ((8, 6), "ampere"),
        ((8, 7), "ampere"),
        ((8, 9), "ada"),
        ((9, 0), "hopper"),
        ((10, 0), "blackwell"),
        ((12, 0), "blackwell"),
        ((8, 8), None),
        (None, None),
    ],
)
def test_architecture_for(capability: tuple[int, int] | None, architecture: str | None) -> None:
    assert architecture_for(capability) == architecture


def test_architecture_falls_back_to_nvml_when_capability_unreadable() -> None:
    fake = h100_pair()
    fake = FakeNvml(
        fake.gpus, fail={"nvmlDeviceGetCudaComputeCapability": (FakeNvml.NVML_ERROR_UNKNOWN, {0})}
    )
    gpus = read_gpus(fake).gpus
    assert gpus[0].compute_capability is None and gpus[0].architecture == "hopper"


# -- detect() ------------------------------------------------------------------------


def test_detect_on_h100_pair(use_nvml: Callable[[Any], None]) -> None:
    use_nvml(h100_pair())

    info = detect(environ={"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2"})

    assert info.source == "nvml" and info.gpu_count == 2 and info.all_nvlink
    assert info.launcher.torchrun and info.launcher.world_size == 2
    assert info.cpu_count is None or info.cpu_count >= 1
    assert info.notes == ()


def test_detect_applies_cuda_visible_devices(use_nvml: Callable[[Any], None]) -> None:
    use_nvml(rtx4090_box())

    info = detect(environ={"CUDA_VISIBLE_DEVICES": "3,1"})

    assert [g.index for g in info.gpus] == [3, 1]
    assert [(link.a, link.b) for link in info.links] == [(1, 3)]
    assert info.launcher.cuda_visible_devices == "3,1"


def test_detect_with_uuid_prefix_and_empty_list(use_nvml: Callable[[Any], None]) -> None:
    use_nvml(rtx4090_box())

    assert [g.index for g in detect(environ={"CUDA_VISIBLE_DEVICES": "GPU-24090"}).gpus] == [2]
    hidden = detect(environ={"CUDA_VISIBLE_DEVICES": ""})
    assert hidden.gpus == () and hidden.links == () and hidden.source == "nvml"
    assert "hides all 4 GPUs" in " ".join(hidden.notes)


def test_detect_mig_slice_selected_by_uuid(use_nvml: Callable[[Any], None]) -> None:
    use_nvml(a100_mig())

    info = detect(environ={"CUDA_VISIBLE_DEVICES": "MIG-22222222"})

    (gpu,) = info.gpus
    assert gpu.mig_slices == ("NVIDIA A100-SXM4-40GB MIG 2g.10gb",)


def test_detect_notes_device_order_on_mixed_machines(use_nvml: Callable[[Any], None]) -> None:
    gpus = h100_pair().gpus[:1] + rtx4090_box().gpus[1:2]
    use_nvml(FakeNvml(gpus))

    assert any("CUDA_DEVICE_ORDER" in note for note in detect(environ={}).notes)
    assert detect(environ={"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}).notes == ()


def test_detect_never_raises(
    use_nvml: Callable[[Any], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    use_nvml(h100_pair())

    def broken() -> int:
        raise RuntimeError("no /proc here")

    monkeypatch.setattr("accelkit.hardware.environment.cpu_count", broken)
    info = detect(environ={})

    assert info.source == "none"
    assert info.notes == ("hardware detection failed unexpectedly: RuntimeError: no /proc here",)


@pytest.mark.parametrize("machine", [h100_pair, rtx4090_box, a100_mig, hgx_h100])
def test_detected_snapshot_round_trips_through_json(
    use_nvml: Callable[[Any], None], machine: Callable[[], FakeNvml]
) -> None:
    use_nvml(machine())
    info = detect(environ={"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1", "b:1"]}})})

    assert HardwareInfo.from_json(info.to_json()) == info


# -- this machine ------------------------------------------------------------------


def test_real_detect_without_gpu_is_cpu_only_and_imports_no_framework() -> None:
    """On a machine without libnvidia-ml, detect() says why and loads no framework."""
    script = textwrap.dedent(
        """
        import json, sys
        import accelkit
        detect = getattr(accelkit, "detect", None)
        if detect is None:  # the package root may not re-export it yet
            from accelkit.hardware import detect
        info = detect()
        print(json.dumps({
            "info": info.to_dict(),
            "frameworks": sorted(m for m in ("torch", "tensorflow") if m in sys.modules),
        }))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
        timeout=120,
        check=True,
    )
    output = json.loads(result.stdout)
    info = HardwareInfo.from_dict(output["info"])

    assert output["frameworks"] == []
    if info.source == "nvml":
        pytest.skip("this machine has NVML; the CPU-only path is covered by the fakes")
    assert info.gpus == () and info.links == ()
    assert any(note.startswith("NVML not available:") for note in info.notes)
    assert info.cpu_count and info.cpu_count >= 1
