"""Snapshots of hardware you don't have, built from the datasheet table."""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from accelkit import specs
from accelkit.hardware.environment import read_launcher
from accelkit.hardware.info import GpuInfo, HardwareInfo, Link


class UnknownGPUError(ValueError):
    """No datasheet row matches the GPU name; the message names the nearest ones."""


def what_if(gpu: str | None, count: int = 1, *,
            environ: Mapping[str, str] | None = None) -> HardwareInfo:
    """A `HardwareInfo` for `count` GPUs of the model `gpu`, as its datasheet describes it.

    The topology comes from the datasheet: every pair has peer-to-peer access
    when the model supports it (GeForce RTX 40/50-series do not), over NVLink
    when the model has NVLink.

    Args:
        gpu: a name or alias from the table (`accelkit specs` lists them), or None
            for a machine without a GPU.
        count: number of GPUs (>= 1; ignored when `gpu` is None).
        environ: launcher variables to plan under (torchrun's, TF_CONFIG); none by default.

    Raises:
        UnknownGPUError: `gpu` matches no row (the message suggests the nearest names).
        ValueError: `count` < 1.

    Example:
        >>> what_if("H100 SXM", count=8).gpu_count
        8
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count={count!r} is not valid; use a whole number >= 1")
    launcher = read_launcher(environ or {})
    if gpu is None:
        return HardwareInfo(launcher=launcher, source="what-if",
                            notes=("what-if: a machine without a GPU",))
    spec = specs.lookup(gpu)
    if spec is None:
        raise UnknownGPUError(specs.unknown_message(gpu))
    gpus = tuple(
        GpuInfo(
            index=i,
            name=spec.name,
            compute_capability=spec.compute_capability,
            architecture=spec.architecture,
            memory_bytes=int(spec.memory_gb * 1e9),
            ecc_enabled=spec.ecc,
            power_limit_w=spec.tdp_w,
            nvlink_links=None,
        )
        for i in range(count)
    )
    links = tuple(
        Link(a=a, b=b, p2p=spec.p2p, nvlink=spec.nvlink_gbps is not None,
             common_ancestor="datasheet")
        for a, b in itertools.combinations(range(count), 2)
    )
    return HardwareInfo(
        gpus=gpus,
        links=links,
        launcher=launcher,
        source="what-if",
        notes=(f"what-if: {count} x {spec.name}, figures and topology from the datasheet "
               f"({spec.source})",),
    )
