"""Snapshots of hardware you don't have, built from the datasheet table.

Counts are bounded by what exists, so a what-if stays a few thousand objects at most:

- `MAX_GPUS_PER_NODE` = 16: the most GPUs NVIDIA has put in one server, the DGX-2 /
  HGX-2 (16 V100 on NVSwitch, DGX-2 datasheet, 2018); today's HGX/DGX H100, H200 and
  B200 boards hold 8 (DGX H100/H200 and DGX B200 datasheets).
- `MAX_GPUS` = 16,384: the H100 count that trained Llama 3 405B (The Llama 3 Herd of
  Models, 2024, section 3.3.1), the largest training run with its GPU count and
  topology published. Projections (`--project NAME:COUNT`) go up to that size; a
  what-if of it builds in about a second.

Links are built within a node only (pairs across nodes meet over the network, not
peer-to-peer), so the topology is O(count), never count x (count - 1) / 2 pairs.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from accelkit import specs
from accelkit.hardware.environment import read_launcher
from accelkit.hardware.info import GpuInfo, HardwareInfo, Link

MAX_GPUS_PER_NODE = 16
MAX_GPUS = 16_384


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


def nodes_for(count: int) -> int:
    """Servers a what-if of `count` GPUs spans (`MAX_GPUS_PER_NODE` each).

    Example:
        >>> nodes_for(8), nodes_for(17)
        (1, 2)
    """
    return -(-count // MAX_GPUS_PER_NODE)


def what_if(
    gpu: str | None, count: int = 1, *, environ: Mapping[str, str] | None = None
) -> HardwareInfo:
    """A `HardwareInfo` for `count` GPUs of the model `gpu`, as its datasheet describes it.

    The topology comes from the datasheet: every pair in a server has peer-to-peer
    access when the model supports it (GeForce RTX 40/50-series do not), over NVLink
    when the model has NVLink. More than `MAX_GPUS_PER_NODE` GPUs fill servers of
    that many, with links only within each (O(count) links).

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
        >>> what_if("H100 SXM", count=8).gpu_count
        8
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
    links = tuple(
        Link(
            a=a, b=b, p2p=spec.p2p, nvlink=spec.nvlink_gbps is not None, common_ancestor="datasheet"
        )
        for first in range(0, count, MAX_GPUS_PER_NODE)
        for a, b in itertools.combinations(range(first, min(first + MAX_GPUS_PER_NODE, count)), 2)
    )
    unknown = (
        (f"; its datasheet peaks are unknown, so MFU will be None: {spec.notes}")
        if spec.peaks_unknown
        else ""
    )
    nodes = nodes_for(count)
    across = (
        f", {nodes} servers of up to {MAX_GPUS_PER_NODE} (links within each)" if nodes > 1 else ""
    )
    return HardwareInfo(
        gpus=gpus,
        links=links,
        launcher=launcher,
        source="what-if",
        notes=(
            (
                f"what-if: {count} x {spec.name}{across}, figures and topology from the "
                f"datasheet ({spec.source}){unknown}"
            ),
            *([variant] if variant else []),
        ),
    )
