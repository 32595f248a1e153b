"""Distribution decisions: which engine runs several devices, and NCCL's variables.

accelkit never writes a variable that enables NVLink multicast (NVLS): on some
hosts it can take every GPU of the machine out of service.
"""

from __future__ import annotations

from accelkit.hardware.info import HardwareInfo
from accelkit.planning.keys import CrossDevice, Key
from accelkit.planning.types import Distribution, Framework, Request, Setting

NEVER_SET = frozenset({"NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
                       "NVSHMEM_DISABLE_NVLS"})


def choose(hardware: HardwareInfo, request: Request) -> tuple[Distribution, list[Setting]]:
    """The distribution engine and the settings that go with it."""
    if request.distribute is Distribution.NONE:
        return Distribution.NONE, []
    if hardware.mig_enabled:
        return Distribution.NONE, [Setting(
            Key.DISTRIBUTION, "none",
            "MIG slices: NCCL cannot run collectives between MIG instances, so each "
            "process trains on its own slice")]
    if request.framework is Framework.TENSORFLOW:
        distribution, out = _tensorflow(hardware)
    else:
        distribution, out = _torch(hardware)
    if distribution in (Distribution.DDP, Distribution.MULTI_WORKER_MIRRORED) and hardware.gpus:
        out += nccl_settings(hardware)
    _check_requested(request, distribution)
    return distribution, out


def _check_requested(request: Request, chosen: Distribution) -> None:
    wanted = request.distribute
    if wanted in (Distribution.AUTO, Distribution.NONE) or wanted is chosen:
        return
    raise ValueError(
        f"distribute={wanted.value!r} does not fit this machine and launcher "
        f"(accelkit would use {chosen.value!r}); use 'auto' or 'none'"
    )


def _tensorflow(hardware: HardwareInfo) -> tuple[Distribution, list[Setting]]:
    launcher = hardware.launcher
    if launcher.tf_config:
        communication = CrossDevice.NCCL if hardware.gpus else CrossDevice.RING
        return Distribution.MULTI_WORKER_MIRRORED, [Setting(
            Key.TF_STRATEGY, communication,
            f"TF_CONFIG names {launcher.tf_config_workers} workers (this is "
            f"{launcher.tf_config_task}): MultiWorkerMirroredStrategy, synchronous data "
            f"parallelism across them, {communication} all-reduce")]
    if hardware.gpu_count > 1:
        if hardware.all_peers_reachable is False:
            ops, why = CrossDevice.HIERARCHICAL_COPY, (
                "some GPU pairs have no peer-to-peer access, so gradients are reduced "
                "through one device instead of NCCL")
        else:
            ops, why = (CrossDevice.NCCL_ALL_REDUCE,
                        "the GPUs reach each other peer-to-peer: NCCL all-reduce")
        return Distribution.MIRRORED, [Setting(
            Key.TF_STRATEGY, ops,
            f"{hardware.gpu_count} local GPUs in one process: MirroredStrategy; {why}")]
    return Distribution.NONE, []


def _torch(hardware: HardwareInfo) -> tuple[Distribution, list[Setting]]:
    launcher = hardware.launcher
    if launcher.torchrun and (launcher.world_size or 1) > 1:
        backend = "nccl" if hardware.gpus else "gloo"
        return Distribution.DDP, [
            Setting(Key.TORCH_PROCESS_GROUP, backend,
                    f"torchrun started {launcher.world_size} processes on {launcher.nodes} "
                    f"node(s): a {backend} process group; DistributedDataParallel in "
                    "accelkit.torch.fit"),
            *([Setting(Key.TORCH_DEVICE, launcher.local_rank,
                       "each rank drives the GPU of its LOCAL_RANK, so ranks do not "
                       "share GPU 0")] if hardware.gpus else []),
        ]
    if hardware.gpu_count > 1:
        count = hardware.gpu_count
        return Distribution.NONE, [Setting(
            Key.LAUNCH, f"torchrun --nproc-per-node {count} your_script.py",
            f"{count} GPUs visible but one process: relaunch under torchrun for "
            "DistributedDataParallel (DataParallel is slower and single-process)")]
    return Distribution.NONE, []


def nccl_settings(hardware: HardwareInfo) -> list[Setting]:
    """NCCL variables the topology calls for; none where NCCL's defaults are right."""
    out: list[Setting] = []
    blocked = [(link.a, link.b) for link in hardware.links if link.p2p is False]
    if blocked:
        pairs = ", ".join(f"{a}-{b}" for a, b in blocked[:4]) + (" ..." if len(blocked) > 4 else "")
        out.append(Setting(
            Key.NCCL_P2P_DISABLE, "1",
            f"no peer-to-peer access between GPUs {pairs} (NVML): NCCL goes through host "
            "memory instead of trying P2P, which hangs on e.g. GeForce RTX 40-series"))
    if hardware.launcher.nodes > 1 and not hardware.infiniband:
        out.append(Setting(
            Key.NCCL_SOCKET_IFNAME, "<fast interface>",
            f"{hardware.launcher.nodes} nodes and no InfiniBand device: NCCL uses TCP "
            "sockets; set NCCL_SOCKET_IFNAME to the fastest interface (e.g. 'eth0') so it "
            "does not pick a slow or unreachable one"))
    return out
