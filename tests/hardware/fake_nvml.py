"""A fake `pynvml` and the machines `test_detect` reads through it.

The fake implements the handful of pynvml functions the reader calls, with
pynvml's constants and error hierarchy (values copied from nvidia-ml-py), so
machines we don't have can be described in a few lines: a card model, how many,
and what differs per card (`cards`); a machine builder adds the links, and any
`FakeNvml` option (``fail=``, ``cuda=``, ...) passes through it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, ClassVar

GIB = 1024**3


class NVMLError(Exception):
    """pynvml's base error: `value` is the NVML return code."""

    _strings: ClassVar[dict[int, str]] = {
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


@dataclasses.dataclass(frozen=True)
class FakeGpu:
    """One card as the fake reports it; `cards` numbers copies of a model."""

    name: str
    capability: tuple[int, int]
    architecture: int  # NVML_DEVICE_ARCH_*
    memory_bytes: int
    bus_width: int
    memory_clock_mhz: int
    power_mw: int
    uuid: str = ""
    bus_id: str = ""
    pcie: tuple[int, int] = (4, 16)
    ecc: bool | None = True  # None: NOT_SUPPORTED, like GeForce cards
    # one entry per NVLink link: None inactive, else (remote device type, remote bus id)
    nvlinks: tuple[tuple[int, str] | None, ...] = ()
    mig: tuple[tuple[str, str], ...] | None = None  # None: MIG not supported; () supported, off


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
            raise self.NVMLError_NotSupported
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
            raise self.NVMLError_NotSupported
        if link >= len(links):
            raise self.NVMLError_InvalidArgument
        return int(links[link] is not None)

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: tuple, link: int) -> int:
        return self._gpu(handle).nvlinks[link][0]

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: tuple, link: int) -> SimpleNamespace:
        return SimpleNamespace(busId=self._gpu(handle).nvlinks[link][1])

    def nvmlDeviceGetMigMode(self, handle: tuple) -> list[int]:
        if self._gpu(handle).mig is None:
            raise self.NVMLError_NotSupported
        mode = int(self.mig_enabled)
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: tuple) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: tuple, slot: int) -> tuple:
        if slot >= len(self._gpu(handle).mig):
            raise self.NVMLError_NotFound
        return ("mig", handle[1], slot)

    # pairs
    def nvmlDeviceGetP2PStatus(self, first: tuple, second: tuple, index: int) -> int:
        assert index == 0, "the reader must unwrap pynvml's tuple constant"
        return self.p2p(first[1], second[1])

    def nvmlDeviceGetTopologyCommonAncestor(self, first: tuple, second: tuple) -> int:
        return self.topology(first[1], second[1])


GPU, SWITCH = FakeNvml.NVML_NVLINK_DEVICE_TYPE_GPU, FakeNvml.NVML_NVLINK_DEVICE_TYPE_SWITCH


def bus(index: int) -> str:
    """The PCI bus id of card `index` in a machine built by `cards`."""
    return f"00000000:{0x18 + 0x10 * index:02X}:00.0"


def cards(model: FakeGpu, count: int, **per_card: Callable[[int], Any]) -> list[FakeGpu]:
    """`count` cards of `model`: card i sits on `bus(i)`, its UUID is the model's with
    ``{i}`` filled in, and each field in `per_card` is computed from i."""
    return [
        dataclasses.replace(
            model,
            uuid=model.uuid.format(i=i),
            bus_id=bus(i),
            **{field: value(i) for field, value in per_card.items()},
        )
        for i in range(count)
    ]


# -- card models -------------------------------------------------------------------

H100_NVL = FakeGpu(
    name="NVIDIA H100 NVL",
    uuid="GPU-{i}h100-0000-0000-0000-000000000000",
    capability=(9, 0),
    architecture=9,
    memory_bytes=94 * GIB,
    bus_width=6144,
    memory_clock_mhz=2619,
    power_mw=400_000,
    pcie=(5, 16),
    mig=(),
)
H100_SXM = FakeGpu(
    name="NVIDIA H100 80GB HBM3",
    uuid="GPU-{i}sxm0-0000-0000-0000-000000000000",
    capability=(9, 0),
    architecture=9,
    memory_bytes=80 * GIB,
    bus_width=5120,
    memory_clock_mhz=2619,
    power_mw=700_000,
    pcie=(5, 16),
    # what a real HGX H200 reports: type SWITCH, and no PCI address for the switch
    nvlinks=((SWITCH, "FFFFFFFF:FF:FF.0"),) * 18,
    mig=(),
)
RTX_4090 = FakeGpu(
    name="NVIDIA GeForce RTX 4090",
    uuid="GPU-{i}4090-aaaa-bbbb-cccc-dddddddddddd",
    capability=(8, 9),
    architecture=8,
    memory_bytes=24 * GIB,
    bus_width=384,
    memory_clock_mhz=10501,
    power_mw=450_000,
    ecc=None,
)
A100_40GB = FakeGpu(
    name="NVIDIA A100-SXM4-40GB",
    uuid="GPU-a100a100-0000-0000-0000-000000000000",
    capability=(8, 0),
    architecture=7,
    memory_bytes=40 * GIB,
    bus_width=5120,
    memory_clock_mhz=1215,
    power_mw=400_000,
)

# -- machines ----------------------------------------------------------------------


def h100_pair(**options: Any) -> FakeNvml:
    """Two H100 NVL cards joined by NVLink bridges (6 links each way)."""
    gpus = cards(H100_NVL, 2, nvlinks=lambda i: ((GPU, bus(1 - i)),) * 6 + (None,) * 12)
    return FakeNvml(gpus, topology=lambda a, b: 40, **options)


def rtx4090_box(**options: Any) -> FakeNvml:
    """Four GeForce RTX 4090: no NVLink, no ECC, no MIG, P2P disabled by the driver."""
    return FakeNvml(
        cards(RTX_4090, 4),
        p2p=lambda a, b: FakeNvml.NVML_P2P_STATUS_GPU_NOT_SUPPORTED,
        topology=lambda a, b: 40 if a // 2 == b // 2 else 50,
        **options,
    )


def hgx_h100(count: int = 4, **options: Any) -> FakeNvml:
    """H100 SXM GPUs whose 18 links all go to NVSwitches."""
    return FakeNvml(cards(H100_SXM, count), topology=lambda a, b: 50, **options)


def a100_mig(*, mig_enabled: bool = True, **options: Any) -> FakeNvml:
    """One A100 split into three MIG slices (or MIG-capable with MIG off)."""
    slices = (
        ("NVIDIA A100-SXM4-40GB MIG 3g.20gb", "MIG-11111111-aaaa-bbbb-cccc-000000000001"),
        ("NVIDIA A100-SXM4-40GB MIG 2g.10gb", "MIG-22222222-aaaa-bbbb-cccc-000000000002"),
        ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", "MIG-33333333-aaaa-bbbb-cccc-000000000003"),
    )
    gpus = cards(A100_40GB, 1, mig=lambda i: slices)
    return FakeNvml(gpus, mig_enabled=mig_enabled, **options)
