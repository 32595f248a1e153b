"""How the GPUs are joined: each GPU's NVLink links, and each pair's P2P access,
NVLink and nearest PCIe ancestor, read through NVML.

The NVML reader (`accelkit.hardware.nvml`) calls `read_nvlinks` once per GPU
and `read_links` once for the machine; every NVML call goes through its
`NvmlCalls`, so a link that cannot be read is None with a note, never an
exception.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from accelkit.hardware.info import GpuInfo, Link
from accelkit.hardware.nvml_calls import NvmlCalls, normalise_bus_id

# One active NVLink link's far end: (remote PCI bus id, remote is an NVSwitch); None: unknown.
NvLinkTarget = tuple[str | None, bool | None]

# NVML's topology levels (nvmlGpuTopologyLevel_t), nearest first.
TOPOLOGY_LEVELS = {
    0: "internal",  # same board (e.g. a dual-GPU card)
    10: "single",  # one PCIe switch between them (nvidia-smi: PIX)
    20: "multiple",  # several PCIe switches, no host bridge (PXB)
    30: "hostbridge",  # the same PCIe host bridge (PHB)
    40: "node",  # the same NUMA node, across host bridges (NODE)
    50: "system",  # across the CPU interconnect (SYS)
}

_NVLINK_DEVICE_TYPE_SWITCH = 2  # NVML_NVLINK_DEVICE_TYPE_SWITCH


def read_nvlinks(calls: NvmlCalls, index: int, handle: Any) -> list[NvLinkTarget] | None:
    """Where each active NVLink link of one GPU goes; None when the links could not be read.

    NVML has no link count; links are probed from 0 until NVML says the link
    does not exist (NOT_SUPPORTED on a GPU without NVLink, INVALID_ARGUMENT
    past the last link).

    Args:
        calls: this pass's NVML calls, where a failure is noted.
        index: the GPU's NVML index, for the note.
        handle: the GPU's NVML handle.

    Example:
        >>> len(read_nvlinks(calls, 0, handle))   # doctest: +SKIP
        18
    """
    nvml = calls.nvml
    targets: list[NvLinkTarget] = []
    for link in range(int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))):
        try:
            active = nvml.nvmlDeviceGetNvLinkState(handle, link)
        except Exception as err:  # noqa: BLE001 - classified by is_error, recorded otherwise
            if calls.is_error(err, "NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_INVALID_ARGUMENT"):
                break
            calls.record(str(index), "NVLink state", err)
            return None
        if active == nvml.NVML_FEATURE_ENABLED:
            targets.append(_nvlink_target(nvml, handle, link))
    return targets


def _nvlink_target(nvml: Any, handle: Any, link: int) -> NvLinkTarget:
    """(remote PCI bus id, remote is an NVSwitch) for one active link; None: unknown."""
    switch = getattr(nvml, "NVML_NVLINK_DEVICE_TYPE_SWITCH", _NVLINK_DEVICE_TYPE_SWITCH)
    try:
        is_switch = nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link) == switch
    except Exception:  # noqa: BLE001 - older drivers: a GPU's bus id still names a direct link
        is_switch = None
    try:
        remote = nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link)
        bus_id = normalise_bus_id(remote.busId)
    except Exception:  # noqa: BLE001 - unknown remote: the link counts, its peer is None
        bus_id = None
    return bus_id, is_switch


def read_links(
    calls: NvmlCalls,
    handles: Sequence[tuple[int, Any]],
    gpus: Sequence[GpuInfo],
    nvlinks: Mapping[int, list[NvLinkTarget] | None],
) -> tuple[Link, ...]:
    """One `Link` per pair of GPUs, in NVML index order.

    Args:
        calls: this pass's NVML calls, where a failure is noted.
        handles: ``(NVML index, handle)`` of every GPU read.
        gpus: those GPUs, for their PCI bus ids.
        nvlinks: `read_nvlinks` of each GPU, by NVML index.

    Example:
        >>> links = read_links(calls, handles, gpus, nvlinks)   # doctest: +SKIP
        >>> [(l.a, l.b, l.common_ancestor) for l in links]      # doctest: +SKIP
        [(0, 1, 'nvlink')]
    """
    bus_ids = {g.index: g.pci_bus_id for g in gpus}
    return tuple(
        _link(calls, first, second, nvlink_between(first[0], second[0], nvlinks, bus_ids))
        for first, second in itertools.combinations(handles, 2)
    )


def _link(
    calls: NvmlCalls, first: tuple[int, Any], second: tuple[int, Any], nvlink: bool | None
) -> Link:
    nvml = calls.nvml
    (a, handle_a), (b, handle_b) = first, second
    where = f"{a}-{b}"
    # pynvml defines NVML_P2P_CAPS_INDEX_READ as `0,` (a tuple); ctypes needs the int
    read_index = nvml.NVML_P2P_CAPS_INDEX_READ
    read_index = read_index[0] if isinstance(read_index, tuple) else read_index
    status = calls.call(
        where, "P2P status", lambda: nvml.nvmlDeviceGetP2PStatus(handle_a, handle_b, read_index)
    )
    level = calls.call(
        where, "topology", lambda: nvml.nvmlDeviceGetTopologyCommonAncestor(handle_a, handle_b)
    )
    if nvlink:
        ancestor: str | None = "nvlink"
    else:
        ancestor = None if level is None else TOPOLOGY_LEVELS.get(int(level))
    return Link(
        a=a,
        b=b,
        p2p=None if status is None else status == nvml.NVML_P2P_STATUS_OK,
        nvlink=nvlink,
        common_ancestor=ancestor,
    )


def nvlink_between(
    a: int,
    b: int,
    nvlinks: Mapping[int, list[NvLinkTarget] | None],
    bus_ids: Mapping[int, str | None],
) -> bool | None:
    """Whether NVLink joins GPUs `a` and `b`.

    True when an active link of one reaches the other's PCI bus id, or when
    both have links to NVSwitches (switches are taken as one fabric, as on
    HGX/DGX boards). False when either has no active link, or when every far
    end is known and none joins them. None when a link's state, or whether
    its far end is a switch, could not be read.

    Args:
        a, b: NVML indices of the two GPUs.
        nvlinks: `read_nvlinks` of each GPU, by NVML index.
        bus_ids: each GPU's PCI bus id, by NVML index.

    Example:
        >>> bus_ids = {0: "00000000:18:00.0", 1: "00000000:28:00.0"}
        >>> bridged = {0: [("00000000:28:00.0", False)], 1: [("00000000:18:00.0", False)]}
        >>> nvlink_between(0, 1, bridged, bus_ids), nvlink_between(0, 1, {0: [], 1: []}, bus_ids)
        (True, False)
    """
    targets_a, targets_b = nvlinks.get(a), nvlinks.get(b)
    if targets_a == [] or targets_b == []:
        return False
    if targets_a is None or targets_b is None:
        return None
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
