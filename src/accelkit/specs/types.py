"""The record type of the GPU datasheet table (`gpus.json` beside this file)."""

from __future__ import annotations

import dataclasses
from typing import Any

# Dtype keys of `GpuSpec.peak_tflops`. All figures are *dense* (no 2:4 sparsity);
# "fp16" and "bf16" are with fp32 accumulate, which GeForce cards run at half
# the rate of fp16 accumulate; "int8" is in TOPS.
DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")


@dataclasses.dataclass(frozen=True)
class GpuSpec:
    """One GPU model's datasheet figures, with their source.

    Attributes:
        key: stable identifier, e.g. ``"h100-sxm"``.
        name: display name, e.g. ``"NVIDIA H100 SXM5 80GB"``.
        architecture: ``"pascal"``, ``"volta"``, ``"turing"``, ``"ampere"``,
            ``"ada"``, ``"hopper"`` or ``"blackwell"``.
        compute_capability: ``(major, minor)``.
        segment: ``"datacenter"``, ``"workstation"`` or ``"geforce"``.
        memory_gb: memory size in GB as the datasheet states it; None when no public
            source gives it.
        bandwidth_gbps: memory bandwidth in GB/s; None when unknown.
        nvlink_gbps: total NVLink bandwidth per GPU in GB/s (both directions), None without NVLink.
        nvlink_gpus: how many GPUs one NVLink domain joins: 2 or 4 for cards joined by a
            bridge, 8 or more for modules on an NVSwitch board or rack (HGX, DGX, NVL72);
            None without NVLink, or where the source fixes no count (GH200).
        server_gpus: GPUs one server holds where the model comes only in systems of that
            size, a server being one host under one operating system: 4 in a GB200 NVL72
            compute tray (two superchips), whose NVLink domain spans 18 of them; None
            where a server holds what its board or its cards make it
            (`accelkit.hardware.what_if.server_gpus`).
        pcie_gbps: the PCIe link to the host in GB/s, both directions, as datasheets state
            it (PCIe Gen4 x16: 64); None where the source gives none.
        interconnect_source: where `nvlink_gpus`, `server_gpus` and `pcie_gbps` come from
            when not from `source` alone ("" when the row's datasheet states them).
        p2p: whether peer-to-peer over PCIe/NVLink is supported between two of these
            cards (False for GeForce 40/50 series).
        ecc: whether the memory has ECC.
        tdp_w: board power (the default power limit); None when unknown.
        peak_tflops: dense peaks by dtype (keys from `DTYPES`; absent when the chip lacks
            it, or when no public source gives it: `notes` then says which).
        source: where the figures come from (datasheet title and URL).
        notes: how figures not printed in the source were derived, and which are unknown.
    """

    key: str
    name: str
    architecture: str
    compute_capability: tuple[int, int]
    segment: str
    memory_gb: float | None
    bandwidth_gbps: float | None
    nvlink_gbps: float | None
    p2p: bool
    ecc: bool
    tdp_w: float | None
    peak_tflops: dict[str, float]
    source: str
    notes: str = ""
    nvlink_gpus: int | None = None
    server_gpus: int | None = None
    pcie_gbps: float | None = None
    interconnect_source: str = ""

    def peak(self, dtype: str) -> float | None:
        """The dense peak in TFLOP/s for `dtype`; None when the chip has no such path or no
        public source gives the figure (`peaks_unknown`, `notes`)."""
        return self.peak_tflops.get(dtype)

    @property
    def pcie_p2p(self) -> bool:
        """Whether two of these cards reach each other peer-to-peer over PCIe: the row's
        `p2p`, never on GeForce, where NVIDIA does not enable it (a GeForce row's `p2p`
        is its NVLink bridge's, RTX 2080 and 3090; the file's ``convention`` says so)."""
        return self.p2p and self.segment != "geforce"

    @property
    def peaks_unknown(self) -> bool:
        """True for a row that names a known GPU whose peaks no public source gives."""
        return not self.peak_tflops

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["compute_capability"] = list(self.compute_capability)
        return data
