"""The link a ring all-reduce over several GPUs of one model runs on, from its datasheet row.

For hardware you don't have (`accelkit.hardware.what_if`, projections), the ring's
slowest hop sets its pace, so one figure per GPU and direction describes it:

- within one NVLink domain (``nvlink_gpus`` of the row: 8 modules on an HGX/DGX
  NVSwitch board, 72 in a GB200 NVL72 rack, 2 or 4 cards on a bridge): NVLink, at
  half the row's ``nvlink_gbps`` (datasheets state it for both directions together);
- beyond a bridge, within one server (`accelkit.hardware.what_if.server_gpus`): PCIe
  peer-to-peer, at half the row's ``pcie_gbps``; NVIDIA does not enable it on GeForce
  cards (the table's convention), whose NCCL then stages through host memory;
- beyond a board's NVLink domain, or beyond one server: the network between servers,
  whose bandwidth no datasheet row gives. No figure then, with the reason.

These are the links' rated figures: NCCL's measured bus bandwidth stays below them
(nccl-tests, doc/PERFORMANCE.md), so a time computed from them is the least the
all-reduce can take.

    >>> from accelkit import specs
    >>> ring_link(specs.by_key("h100-sxm"), 8).gbps_each_way
    450.0
    >>> ring_link(specs.by_key("l4"), 2).kind
    'PCIe'
"""

from __future__ import annotations

import dataclasses

from accelkit.hardware.what_if import BOARD_NVLINK_GPUS, nodes_for, server_gpus
from accelkit.specs.types import GpuSpec


@dataclasses.dataclass(frozen=True)
class RingLink:
    """The link a ring of GPUs runs on, or why there is no figure for it.

    Attributes:
        kind: ``"NVLink"``, ``"PCIe"``, or ``""`` when there is no figure.
        gbps_each_way: GB/s per GPU and direction; None when there is no figure.
        why: where the figure comes from, or why there is none.
    """

    kind: str
    gbps_each_way: float | None
    why: str


def ring_link(spec: GpuSpec, count: int) -> RingLink:
    """The link a ring all-reduce over `count` GPUs of `spec` runs on (`count` >= 2).

    Example:
        >>> from accelkit import specs
        >>> print(ring_link(specs.by_key("a100-pcie-80gb"), 4).why)  # doctest: +ELLIPSIS
        PCIe peer to peer at 32 GB/s each way, beyond the 2 GPUs its NVLink bridge joins ...
    """
    domain = spec.nvlink_gpus
    if spec.nvlink_gbps and domain and count <= domain:
        each = spec.nvlink_gbps / 2
        return RingLink(
            "NVLink",
            each,
            f"NVLink at {each:g} GB/s each way ({spec.nvlink_gbps:g} both ways in the datasheet "
            f"row; one NVLink domain joins up to {domain}: {_source(spec)})",
        )
    if spec.nvlink_gbps and not domain:
        return _none(
            f"its datasheet row does not say how many GPUs its NVLink joins ({_source(spec)})"
        )
    if domain and domain >= BOARD_NVLINK_GPUS:
        return _none(
            f"{count} GPUs are more than the {domain} one NVLink domain joins ({_source(spec)}): "
            "the all-reduce between servers runs over the network, whose bandwidth no "
            "datasheet row gives"
        )
    if (nodes := nodes_for(count, server_gpus(spec))) > 1:
        return _none(
            f"{count} GPUs span {nodes} servers of up to {server_gpus(spec)}: the "
            "all-reduce between servers runs over the network, whose bandwidth no "
            "datasheet row gives"
        )
    if not spec.pcie_p2p:  # GeForce, by the table's convention
        return _none(
            "GeForce cards have no PCIe peer-to-peer (NVIDIA does not enable it): NCCL "
            "stages the all-reduce through host memory, at a rate no datasheet row gives"
        )
    if not spec.pcie_gbps:
        return _none(f"its datasheet row gives no PCIe bandwidth ({_source(spec)})")
    each = spec.pcie_gbps / 2
    bridge = f", beyond the {domain} GPUs its NVLink bridge joins" if domain else ""
    return RingLink(
        "PCIe",
        each,
        f"PCIe peer to peer at {each:g} GB/s each way{bridge} ({spec.pcie_gbps:g} both ways "
        f"in the datasheet row: {_source(spec)})",
    )


def _none(why: str) -> RingLink:
    return RingLink("", None, why)


def _source(spec: GpuSpec) -> str:
    # The row's own source is a title and a URL, too long for a sentence: named, not quoted.
    return spec.interconnect_source or "its datasheet"
