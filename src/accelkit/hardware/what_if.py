"""Snapshots of hardware you don't have, built from the datasheet table.

Counts are bounded by what exists, so a what-if stays a few thousand objects at most:

- `MAX_GPUS_PER_NODE` = 16: the most GPUs NVIDIA has put in one server, the DGX-2 /
  HGX-2 (16 V100 on NVSwitch, DGX-2 datasheet, 2018); today's HGX/DGX H100, H200 and
  B200 boards hold 8 (DGX H100/H200 and DGX B200 datasheets). A model built on such a
  board fills servers of the board's GPUs (`server_gpus`): 16 H100 SXM are two servers
  of 8, not one of 16.
- `MAX_GPUS` = 16,384: the H100 count that trained Llama 3 405B (The Llama 3 Herd of
  Models, 2024, section 3.3.1), the largest training run with its GPU count and
  topology published. Projections (`--project NAME:COUNT`) go up to that size; a
  what-if of it builds in about a second.

Links are built within a node only (pairs across nodes meet over the network, not
peer-to-peer), so the topology is O(count), never count x (count - 1) / 2 pairs. The
one domain that spans servers, a GB200 NVL72 rack's over its trays of 4, is said by
the snapshot's `nvlink_domain` (`HardwareInfo.nvlink_across_servers`) and its note.

NVLink joins GPUs within one NVLink domain only, of the row's ``nvlink_gpus``: a 2- or
4-way bridge (A100 PCIe, H200 NVL, RTX 3090), an 8- or 16-GPU NVSwitch board (HGX,
DGX), a 72-GPU NVL72 rack. Eight A100 PCIe cards are four bridged pairs that reach
each other over PCIe, not one NVLink fabric. GPUs ``i`` and ``j`` of a server share a
domain when ``i // nvlink_gpus == j // nvlink_gpus``; between domains they are PCIe
peers where the model allows PCIe peer-to-peer (`GpuSpec.pcie_p2p`: never GeForce).
A row with NVLink but no domain size (GH200) is taken as NVLink between every pair of
a server, as before the table had the count, and the snapshot's notes say so.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from accelkit import specs
from accelkit.hardware.environment import read_launcher
from accelkit.hardware.info import MAX_GPUS_PER_NODE, GpuInfo, HardwareInfo, Link
from accelkit.specs.types import GpuSpec

MAX_GPUS = 16_384
# An NVLink domain this large is a server's NVSwitch board (HGX/DGX: 8, HGX A100: up to
# 16) or a rack (GB200 NVL72: 72), whose GPUs reach others over the network only; a
# smaller one is cards joined by a bridge (2, or 4 for the H200 NVL), in a server whose
# other cards they reach over PCIe.
BOARD_NVLINK_GPUS = 8


class UnknownGPUError(ValueError):
    """No datasheet row matches the GPU name; the message names the nearest ones."""


def check_count(count: object, maximum: int = MAX_GPUS, what: str = "count") -> int:
    """`count` when it is a whole number from 1 to `maximum`.

    Args:
        count: the number of GPUs asked for.
        maximum: the largest valid count (`MAX_GPUS`, or `MAX_GPUS_PER_NODE` for one machine).
        what: how the caller names it, for the message (``"count"``, ``"--count"``).

    Raises:
        ValueError: naming the valid range and why it ends there.

    Example:
        >>> check_count(8)
        8
    """
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= maximum:
        why = (
            "the most GPUs one server holds, a DGX-2"
            if maximum == MAX_GPUS_PER_NODE
            else "the largest published training run, Llama 3 405B"
        )
        raise ValueError(
            f"{what}={count!r} is not valid; use a whole number from 1 to {maximum:,} ({why})"
        )
    return count


def nodes_for(count: int, per_server: int = MAX_GPUS_PER_NODE) -> int:
    """Servers a what-if of `count` GPUs spans, `per_server` each (`server_gpus`).

    Example:
        >>> nodes_for(8), nodes_for(17), nodes_for(16, per_server=8)
        (1, 2, 2)
    """
    return -(-count // per_server)


def server_gpus(spec: GpuSpec) -> int:
    """GPUs one server of `spec`'s model holds in a what-if: the row's `server_gpus`
    where the model comes only in systems of that size (a GB200 NVL72 compute tray's 4),
    else its NVSwitch board's where the row's NVLink domain is one (8 on HGX and DGX
    boards, 16 on the HGX A100 16-GPU), else `MAX_GPUS_PER_NODE` (cards in a server).

    Example:
        >>> from accelkit import specs
        >>> server_gpus(specs.by_key("h100-sxm")), server_gpus(specs.by_key("l4"))
        (8, 16)
        >>> server_gpus(specs.by_key("gb200"))
        4
    """
    if spec.server_gpus:
        return spec.server_gpus
    domain = spec.nvlink_gpus or 0
    return domain if BOARD_NVLINK_GPUS <= domain <= MAX_GPUS_PER_NODE else MAX_GPUS_PER_NODE


def what_if(
    gpu: str | None, count: int = 1, *, environ: Mapping[str, str] | None = None
) -> HardwareInfo:
    """A `HardwareInfo` for `count` GPUs of the model `gpu`, as its datasheet describes it.

    The topology comes from the datasheet: GPUs of one NVLink domain (the row's
    ``nvlink_gpus``: a bridge of 2 or 4, a board of 8 or 16) are joined by NVLink;
    other pairs of a server are PCIe peers when the model allows PCIe peer-to-peer
    (GeForce does not), else not peers at all. A row with NVLink but no domain size is
    taken as NVLink between every pair of a server, and a note says it is assumed.
    More GPUs than one server of the model holds (`server_gpus`: an HGX board's 8, else
    `MAX_GPUS_PER_NODE`) fill servers of that many, with links only within each
    (O(count) links). A note says the topology in words.

    Args:
        gpu: a name or alias from the table (`accelkit specs` lists them), or None
            for a machine without a GPU. A short name several rows share (``"H100"``,
            ``"A100"``) is its most deployed variant (`accelkit.specs.resolve`), with
            a note naming the others.
        count: number of GPUs, 1 to `MAX_GPUS` (ignored when `gpu` is None).
        environ: launcher variables to plan under (torchrun's, TF_CONFIG); none by default.

    Raises:
        UnknownGPUError: `gpu` matches no row (the message suggests the nearest names).
        ValueError: `count` is not a whole number from 1 to `MAX_GPUS`.

    Example:
        >>> what_if("H100 SXM", count=8).all_nvlink
        True
        >>> links = what_if("A100 PCIe", count=4).links
        >>> [(link.a, link.b) for link in links if link.nvlink] == [(0, 1), (2, 3)]  # bridges
        True
    """
    check_count(count)
    launcher = read_launcher(environ or {})
    if gpu is None:
        return HardwareInfo(
            launcher=launcher, source="what-if", notes=("what-if: a machine without a GPU",)
        )
    spec, variant = specs.resolve(gpu)  # "H100": the most deployed variant, noted
    if spec is None:
        raise UnknownGPUError(specs.unknown_message(gpu))
    gpus = tuple(
        GpuInfo(
            index=i,
            name=spec.name,
            compute_capability=spec.compute_capability,
            architecture=spec.architecture,
            memory_bytes=None if spec.memory_gb is None else int(spec.memory_gb * 1e9),
            ecc_enabled=spec.ecc,
            power_limit_w=spec.tdp_w,
            nvlink_links=None,
        )
        for i in range(count)
    )
    domain, server = _nvlink_domain(spec), server_gpus(spec)
    links = tuple(
        _link(spec, a, b, domain)
        for first in range(0, count, server)
        for a, b in itertools.combinations(range(first, min(first + server, count)), 2)
    )
    unknown = (
        (f"; its datasheet peaks are unknown, so MFU will be None: {spec.notes}")
        if spec.peaks_unknown
        else ""
    )
    nodes = nodes_for(count, server)
    spans = domain > server  # a rack's NVLink domain over its servers (GB200 NVL72)
    joined = f"NVLink across up to {domain} GPUs" if spans else "links within each"
    across = f", {nodes} servers of up to {server} ({joined})" if nodes > 1 else ""
    return HardwareInfo(
        gpus=gpus,
        links=links,
        launcher=launcher,
        source="what-if",
        server_gpus=server,
        nvlink_domain=spec.nvlink_gpus if spec.nvlink_gbps else None,
        notes=(
            (
                f"what-if: {count} x {spec.name}{across}, figures and topology from the "
                f"datasheet ({spec.source}){unknown}"
            ),
            *([_topology(spec, count)] if count > 1 else []),
            *([variant] if variant else []),
        ),
    )


def _nvlink_domain(spec: GpuSpec) -> int:
    """GPUs one NVLink domain joins in a what-if: the row's `nvlink_gpus`; a whole server
    where the row has NVLink but no count (assumed: `_topology` says so); 1 without NVLink."""
    if not spec.nvlink_gbps:
        return 1
    return spec.nvlink_gpus or MAX_GPUS_PER_NODE


def _link(spec: GpuSpec, a: int, b: int, domain: int) -> Link:
    """GPUs `a` and `b` of one server: NVLink peers within a domain, PCIe peers beyond it
    where the model allows PCIe peer-to-peer."""
    nvlink = a // domain == b // domain
    return Link(
        a=a,
        b=b,
        p2p=spec.p2p if nvlink else spec.pcie_p2p,
        nvlink=nvlink,
        common_ancestor="datasheet",
    )


def _topology(spec: GpuSpec, count: int) -> str:
    """The links of a what-if of `count` (>= 2) GPUs in words, with their source."""
    cited = f" ({spec.interconnect_source})" if spec.interconnect_source else ""
    server = min(count, server_gpus(spec))  # the GPUs of the first (or only) server
    one = count == server
    if not spec.nvlink_gbps:
        gpus = "the GPUs" if one else "the GPUs of a server"
        return f"what-if topology: no NVLink, {_beyond(spec, gpus)}{cited}"
    pairs = "every pair" if one else "every pair of a server"
    domain = spec.nvlink_gpus
    if not domain:
        return (
            f"what-if topology: NVLink between {pairs}, assumed: the datasheet row does not "
            f"say how many GPUs one NVLink domain joins{cited}"
        )
    if domain > server and not one:  # a rack's domain over its servers (GB200 NVL72)
        beyond = "" if count <= domain else "; the domains meet over the network"
        return (
            f"what-if topology: NVLink between every pair of a server and across servers: "
            f"one NVLink domain joins up to {domain} ({domain // server} servers of "
            f"{server}){beyond}{cited}"
        )
    if domain >= server:
        return (
            f"what-if topology: NVLink between {pairs}, one NVLink domain of up to {domain}{cited}"
        )
    ends = [(i, min(i + domain, server) - 1) for i in range(0, server, domain)]
    groups = [f"{first}-{last}" if last > first else f"{first}" for first, last in ends]
    shown = ", ".join(groups[:4]) + (", ..." if len(groups) > 4 else "")
    return (
        f"what-if topology: NVLink within each group of {domain} (GPUs {shown}), "
        f"{_beyond(spec, 'the groups')}{cited}"
    )


def _beyond(spec: GpuSpec, who: str) -> str:
    if spec.pcie_p2p:
        return f"PCIe peer-to-peer between {who}"
    return (
        f"no peer-to-peer between {who}: NVIDIA does not enable PCIe peer-to-peer on GeForce cards"
    )
