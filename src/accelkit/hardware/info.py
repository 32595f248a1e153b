"""Plain-data snapshots of a machine: what `accelkit.detect()` returns.

A `HardwareInfo` round-trips through JSON (`to_dict` / `from_dict`), so a
snapshot taken on any machine can be planned for and tested anywhere.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

# The most GPUs NVIDIA has put in one server: the DGX-2 / HGX-2, 16 V100 on NVSwitch
# (DGX-2 datasheet, 2018). A snapshot of more spans servers of this many at most
# (`accelkit.hardware.what_if` fills them by the model's own server).
MAX_GPUS_PER_NODE = 16


@dataclasses.dataclass(frozen=True)
class GpuInfo:
    """One GPU as NVML reports it. Fields NVML could not read are None.

    Attributes:
        index: NVML index (physical order, not CUDA_VISIBLE_DEVICES order).
        name: the marketing name NVML reports, e.g. ``"NVIDIA H200"``.
        compute_capability: ``(major, minor)``, e.g. ``(9, 0)``.
        architecture: generation name, e.g. ``"hopper"``.
        memory_bytes: total device memory.
        memory_bus_width_bits, max_memory_clock_mhz: for the bandwidth estimate.
        ecc_enabled: current ECC mode.
        pcie_generation, pcie_width: the link's maximum generation and width.
        power_limit_w: the enforced power limit.
        nvlink_links: number of active NVLink links.
        mig_enabled: True when the GPU is split into MIG slices.
        mig_slices: the MIG devices' names when MIG is on.
        mig_uuids: the MIG devices' UUIDs (``"MIG-..."``), in the same order as
            ``mig_slices``; CUDA_VISIBLE_DEVICES can name a slice by one.
        pci_bus_id: e.g. ``"00000000:18:00.0"``; ties NVLink peers and CUDA's
            PCI_BUS_ID device order to this GPU.
    """

    index: int
    name: str
    uuid: str | None = None
    compute_capability: tuple[int, int] | None = None
    architecture: str | None = None
    memory_bytes: int | None = None
    memory_bus_width_bits: int | None = None
    max_memory_clock_mhz: int | None = None
    ecc_enabled: bool | None = None
    pcie_generation: int | None = None
    pcie_width: int | None = None
    power_limit_w: float | None = None
    nvlink_links: int | None = None
    mig_enabled: bool = False
    mig_slices: tuple[str, ...] = ()
    mig_uuids: tuple[str, ...] = ()
    pci_bus_id: str | None = None

    @property
    def memory_gb(self) -> float | None:
        return None if self.memory_bytes is None else self.memory_bytes / 1e9

    @property
    def memory_bandwidth_gbps(self) -> float | None:
        """Peak memory bandwidth in GB/s from bus width and max memory clock.

        bytes/s = clock (Hz) x 2 (double data rate) x bus width (bits) / 8.
        Approximate for GDDR6X/GDDR7 (PAM signalling); the spec table holds the
        datasheet figure.
        """
        if not self.memory_bus_width_bits or not self.max_memory_clock_mhz:
            return None
        return self.max_memory_clock_mhz * 1e6 * 2 * self.memory_bus_width_bits / 8 / 1e9

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GpuInfo:
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in fields}
        if values.get("compute_capability") is not None:
            values["compute_capability"] = tuple(values["compute_capability"])
        values["mig_slices"] = tuple(values.get("mig_slices", ()))
        values["mig_uuids"] = tuple(values.get("mig_uuids", ()))
        return cls(**values)


@dataclasses.dataclass(frozen=True)
class Link:
    """How two GPUs reach each other (NVML indices `a` < `b`)."""

    a: int
    b: int
    p2p: bool | None  # NVML's P2P read status; None when it could not be read
    nvlink: bool | None = None  # connected by NVLink (directly or through NVSwitch)
    # NVML topology level: "nvlink", "internal", "single", "multiple", "hostbridge",
    # "node" or "system" (nvidia-smi topo's NV#, PIX, PXB, PHB, NODE, SYS)
    common_ancestor: str | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Link:
        return cls(**data)


@dataclasses.dataclass(frozen=True)
class LauncherEnv:
    """What the launcher told this process (torchrun, SLURM's srun, TF_CONFIG,
    CUDA_VISIBLE_DEVICES).

    Under ``srun`` (several tasks, no torchrun) the rank fields come from SLURM_PROCID,
    SLURM_LOCALID and SLURM_NTASKS, ``master_addr`` from the first node of
    SLURM_JOB_NODELIST and ``master_port`` from SLURM_JOB_ID (`accelkit.hardware.slurm`),
    and ``scheduler`` is ``"slurm"``.
    """

    rank: int | None = None
    local_rank: int | None = None
    world_size: int | None = None
    local_world_size: int | None = None
    master_addr: str | None = None
    tf_config_workers: int | None = None  # number of workers in TF_CONFIG's cluster
    tf_config_task: str | None = None  # e.g. "worker:0"
    cuda_visible_devices: str | None = None
    master_port: int | None = None
    scheduler: str | None = None  # "slurm" when srun started this process, not torchrun
    nnodes: int | None = None  # nodes the scheduler names (SLURM_NNODES)
    job_id: str | None = None  # SLURM_JOB_ID

    @property
    def torchrun(self) -> bool:
        return (
            self.scheduler is None and self.world_size is not None and self.local_rank is not None
        )

    @property
    def slurm(self) -> bool:
        """True when srun started this process as one of several tasks (torchrun did not)."""
        return self.scheduler == "slurm" and (self.world_size or 1) > 1

    @property
    def tf_config(self) -> bool:
        return self.tf_config_workers is not None

    @property
    def nodes(self) -> int:
        """Number of machines taking part (1 when it cannot be told)."""
        if self.nnodes:
            return max(1, self.nnodes)
        if self.torchrun and self.local_world_size:
            return max(1, (self.world_size or 1) // self.local_world_size)
        return 1

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LauncherEnv:
        return cls(**data)


@dataclasses.dataclass(frozen=True)
class FrameworkBuild:
    """What an installed framework was built for (`accelkit.hardware.framework_builds`).

    Attributes:
        framework: ``"torch"`` or ``"tensorflow"``.
        version: its version, e.g. ``"2.13.0+cpu"``; None when it could not be read.
        cuda: True when built with CUDA, False when built without it (a CPU-only or
            ROCm build: it cannot use an NVIDIA GPU), None when it could not be told.
        detail: what it was built for, e.g. ``"CUDA 12.8"``, ``"CPU only"``, ``"ROCm 6.2"``.
    """

    framework: str
    version: str | None = None
    cuda: bool | None = None
    detail: str = ""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FrameworkBuild:
        return cls(**data)


@dataclasses.dataclass(frozen=True)
class HardwareInfo:
    """A snapshot of the machine a run is on.

    Build one with `accelkit.detect()`, from JSON with `HardwareInfo.from_dict`,
    or for a GPU you don't have with `accelkit.hardware.what_if(...)`.

    Attributes:
        gpus: visible GPUs (after CUDA_VISIBLE_DEVICES), in CUDA order.
        links: one entry per pair of GPUs.
        driver_version, cuda_driver_version: e.g. ``"580.159.04"``, ``"13.0"``.
        cpu_count, host_memory_bytes: the host.
        infiniband: True when an InfiniBand device is present.
        launcher: the launcher's variables.
        source: ``"nvml"``, ``"what-if"``, ``"snapshot"`` or ``"none"``.
        notes: why something is missing (e.g. "NVML not available: ...").
        frameworks: what the installed frameworks were built for, read when NVML shows
            GPUs (a what-if snapshot has none: it plans for the build you would install).
        gpus_unusable: why the GPUs the driver shows are not in this snapshot: it is the
            machine as a framework built without CUDA sees it
            (`accelkit.hardware.framework_builds.usable_by`); "" otherwise.
        server_gpus: a what-if's GPUs per server (`accelkit.hardware.what_if.server_gpus`:
            8 for an HGX board of H100s); None for a detected machine, whose GPUs are
            one server's.
        nvlink_domain: a what-if's GPUs one NVLink domain joins (the datasheet row's
            `nvlink_gpus`: 8 on an HGX board, 72 in a GB200 NVL72 rack, whose domain
            spans its servers); None for a detected machine (its links say) or without
            NVLink.
    """

    gpus: tuple[GpuInfo, ...] = ()
    links: tuple[Link, ...] = ()
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    cpu_count: int | None = None
    host_memory_bytes: int | None = None
    infiniband: bool = False
    launcher: LauncherEnv = dataclasses.field(default_factory=LauncherEnv)
    source: str = "none"
    notes: tuple[str, ...] = ()
    frameworks: tuple[FrameworkBuild, ...] = ()
    gpus_unusable: str = ""
    server_gpus: int | None = None
    nvlink_domain: int | None = None

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    @property
    def nvlink_across_servers(self) -> bool:
        """True when the GPUs span several servers of one NVLink domain (a what-if of
        GB200s within an NVL72 rack): NCCL's collectives cross the servers over NVLink."""
        return self.servers > 1 and (self.nvlink_domain or 0) >= self.gpu_count

    @property
    def servers(self) -> int:
        """Servers the GPUs span: one for a detected machine, as many as a what-if of
        more GPUs than its model's server holds fills (`server_gpus`; a snapshot without
        it, servers of `MAX_GPUS_PER_NODE`)."""
        return max(1, -(-self.gpu_count // (self.server_gpus or MAX_GPUS_PER_NODE)))

    @property
    def gpus_per_server(self) -> int:
        """GPUs in each server the GPUs span (all of them in one)."""
        return min(self.gpu_count, self.server_gpus or MAX_GPUS_PER_NODE)

    @property
    def min_compute_capability(self) -> tuple[int, int] | None:
        """The lowest compute capability among the GPUs (settings must suit all)."""
        capabilities = [g.compute_capability for g in self.gpus if g.compute_capability]
        return min(capabilities) if capabilities else None

    @property
    def all_peers_reachable(self) -> bool | None:
        """True when every GPU pair has P2P (every pair of a server, in a what-if of
        several: servers meet over the network); None when no pair could be read."""
        known = [link.p2p for link in self.links if link.p2p is not None]
        if not known:
            return None
        return all(known) and len(known) == len(self.links)

    @property
    def all_nvlink(self) -> bool:
        """True when NVLink joins every GPU pair (every pair of a server, as above)."""
        return bool(self.links) and all(link.nvlink for link in self.links)

    @property
    def mig_enabled(self) -> bool:
        return any(g.mig_enabled for g in self.gpus)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HardwareInfo:
        return cls(
            gpus=tuple(GpuInfo.from_dict(g) for g in data.get("gpus", ())),
            links=tuple(Link.from_dict(link) for link in data.get("links", ())),
            driver_version=data.get("driver_version"),
            cuda_driver_version=data.get("cuda_driver_version"),
            cpu_count=data.get("cpu_count"),
            host_memory_bytes=data.get("host_memory_bytes"),
            infiniband=bool(data.get("infiniband", False)),
            launcher=LauncherEnv.from_dict(data.get("launcher", {})),
            source=data.get("source", "snapshot"),
            notes=tuple(data.get("notes", ())),
            frameworks=tuple(FrameworkBuild.from_dict(f) for f in data.get("frameworks", ())),
            gpus_unusable=data.get("gpus_unusable", ""),
            server_gpus=data.get("server_gpus"),
            nvlink_domain=data.get("nvlink_domain"),
        )

    def build_of(self, framework: str) -> FrameworkBuild | None:
        """What the installed `framework` was built for, when it was read."""
        return next((b for b in self.frameworks if b.framework == framework), None)

    @classmethod
    def from_json(cls, text: str) -> HardwareInfo:
        return cls.from_dict(json.loads(text))
