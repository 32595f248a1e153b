"""Distribution decisions: which engine runs several devices, and NCCL's variables.

accelkit never writes a variable that enables NVLink multicast (NVLS): on some
hosts it can take every GPU of the machine out of service.
"""

from __future__ import annotations

from accelkit.hardware.info import HardwareInfo
from accelkit.planning.keys import CrossDevice, Key
from accelkit.planning.types import Distribution, Framework, Request, Setting

# `HardwareInfo.source` of a snapshot `accelkit.hardware.what_if` built
WHAT_IF = "what-if"

NEVER_SET = frozenset(
    {"NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"}
)


# DDP's gradients as views into its all-reduce buckets: applied by accelkit.torch.fit
# when it wraps the model (accelkit.torch.tuning.levers says what it needs and what it gives).
BUCKET_VIEW = Setting(
    Key.DDP_BUCKET_VIEW,
    True,
    "gradients live in DDP's all-reduce buckets: no copy of every gradient into its "
    "bucket and back each step, one gradient's memory less; the same numbers "
    "(PyTorch's DistributedDataParallel docs)",
)


def choose(
    hardware: HardwareInfo, request: Request, sharded: bool = False
) -> tuple[Distribution, list[Setting]]:
    """The distribution engine and the settings that go with it.

    Args:
        hardware: the GPUs, their links and the launcher.
        request: what the caller asked.
        sharded: the model's state is sharded (`accelkit.planning.sharding`): PyTorch
            runs FSDP2 in place of DDP.
    """
    if request.distribute is Distribution.NONE:
        return Distribution.NONE, []
    if hardware.mig_enabled:
        return Distribution.NONE, [
            Setting(
                Key.DISTRIBUTION,
                "none",
                "MIG slices: NCCL cannot run collectives between MIG instances, so each "
                "process trains on its own slice",
            )
        ]
    if request.framework is Framework.TENSORFLOW:
        distribution, out = _tensorflow(hardware)
    else:
        distribution, out = _torch(hardware, sharded)
    if (
        distribution in (Distribution.DDP, Distribution.FSDP, Distribution.MULTI_WORKER_MIRRORED)
        and hardware.gpus
    ):
        launched = planned_as_launched(hardware, request) or hardware.servers > 1
        out += nccl_settings(hardware, nodes=hardware.servers if launched else None)
    _check_requested(request, distribution)
    return distribution, out


def planned_as_launched(hardware: HardwareInfo, request: Request) -> bool:
    """True for a what-if of several GPUs with no launcher named (`accelkit.plan_for`,
    ``accelkit plan --gpu``): PyTorch plans it as the torchrun launch it advises, one
    process per GPU, so the plan reads as the run that would use those GPUs. A machine
    detected here without a launcher plans the one process it is, and advises torchrun.

    Example:
        >>> from accelkit import what_if
        >>> planned_as_launched(what_if("H100", 8), Request())
        True
    """
    return request.framework is Framework.TORCH and _what_if_unlaunched(hardware)


def _what_if_unlaunched(hardware: HardwareInfo) -> bool:
    launcher = hardware.launcher
    return (
        hardware.source == WHAT_IF
        and hardware.gpu_count > 1
        and not launcher.torchrun
        and not launcher.slurm
    )


def _tf_servers(hardware: HardwareInfo) -> Setting:
    """TensorFlow's strategy for a what-if past one server: a worker per server."""
    servers, each = hardware.servers, hardware.gpus_per_server
    return Setting(
        Key.TF_STRATEGY,
        CrossDevice.NCCL,
        f"what-if of {hardware.gpu_count} GPUs over {servers} servers of up to {each}: "
        f"planned as {servers} workers, one per server, each mirroring its GPUs, that "
        f"TF_CONFIG names: MultiWorkerMirroredStrategy, NCCL all-reduce (one process "
        "cannot drive another server's GPUs)",
    )


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
    if launcher.tf_config or launcher.slurm:
        communication = CrossDevice.NCCL if hardware.gpus else CrossDevice.RING
        workers = (
            f"TF_CONFIG names {launcher.tf_config_workers} workers (this is "
            f"{launcher.tf_config_task}): MultiWorkerMirroredStrategy"
            if launcher.tf_config
            # TF_CONFIG first, as torchrun's variables
            else f"SLURM started {launcher.world_size} tasks on {launcher.nodes} node(s) "
            f"(this is task {launcher.rank}): MultiWorkerMirroredStrategy through "
            "SlurmClusterResolver"
        )
        return Distribution.MULTI_WORKER_MIRRORED, [
            Setting(
                Key.TF_STRATEGY,
                communication,
                f"{workers}, synchronous data parallelism across them, {communication} all-reduce",
            )
        ]
    if hardware.servers > 1:
        return Distribution.MULTI_WORKER_MIRRORED, [_tf_servers(hardware)]
    if hardware.gpu_count > 1:
        if hardware.all_peers_reachable is False:
            ops, why = (
                CrossDevice.HIERARCHICAL_COPY,
                (
                    "some GPU pairs have no peer-to-peer access, so gradients are reduced "
                    "through one device instead of NCCL"
                ),
            )
        else:
            ops, why = (
                CrossDevice.NCCL_ALL_REDUCE,
                "the GPUs reach each other peer-to-peer: NCCL all-reduce",
            )
        return Distribution.MIRRORED, [
            Setting(
                Key.TF_STRATEGY,
                ops,
                f"{hardware.gpu_count} local GPUs in one process: MirroredStrategy; {why}",
            )
        ]
    return Distribution.NONE, []


def _engine(sharded: bool) -> tuple[Distribution, str, list[Setting]]:
    """PyTorch's engine, how a reason names it, and the settings only it has."""
    if sharded:
        return Distribution.FSDP, "FSDP2 (fully_shard)", []
    return Distribution.DDP, "DistributedDataParallel", [BUCKET_VIEW]


def _torch(hardware: HardwareInfo, sharded: bool) -> tuple[Distribution, list[Setting]]:
    launcher = hardware.launcher
    engine, named, own = _engine(sharded)
    if launcher.torchrun and (launcher.world_size or 1) > 1:
        backend = "nccl" if hardware.gpus else "gloo"
        return engine, [
            Setting(
                Key.TORCH_PROCESS_GROUP,
                backend,
                f"torchrun started {launcher.world_size} processes on {launcher.nodes} "
                f"node(s): a {backend} process group; {named} in accelkit.torch.fit",
            ),
            *(
                [
                    Setting(
                        Key.TORCH_DEVICE,
                        launcher.local_rank,
                        "each rank drives the GPU of its LOCAL_RANK, so ranks do not share GPU 0",
                    )
                ]
                if hardware.gpus
                else []
            ),
            *own,
        ]
    if launcher.slurm:
        return engine, [*_slurm_torch(hardware, named), *own]
    if _what_if_unlaunched(hardware):
        return engine, [_as_launched(hardware, named), *own]
    if hardware.gpu_count > 1:
        return Distribution.NONE, [_launch(hardware, named)]
    return Distribution.NONE, []


def _as_launched(hardware: HardwareInfo, named: str) -> Setting:
    """The launch a what-if of several GPUs is planned under, and what happens without it."""
    count = hardware.gpu_count
    command, nodes = _torchrun(hardware)
    servers = (
        f" over {nodes} servers (run the command on each, HOST being the first)"
        if nodes > 1
        else ""
    )
    nccl = [f"{s.key.value}={s.value}" for s in nccl_settings(hardware, nodes=nodes)]
    variables = f", with {', '.join(nccl)} (their settings say why)" if nccl else ""
    return Setting(
        Key.LAUNCH,
        command,
        f"what-if of {count} GPUs: planned as launched by torchrun with {count} processes"
        f"{servers}, one per GPU, each a rank of an nccl process group{variables}: {named} "
        "in accelkit.torch.fit; without a launcher the script is one process that trains "
        "on one GPU (a plan for several does not hold there) and prints this command",
    )


def _torchrun(hardware: HardwareInfo) -> tuple[str, int]:
    """The torchrun command for these GPUs, with the literal NCCL variables the launched
    run gets (`nccl_settings`), and the servers it spans."""
    count = hardware.gpu_count
    nodes = hardware.servers  # a what-if past one server's GPUs spans several
    per_node = hardware.gpus_per_server
    nccl = nccl_settings(hardware, nodes=nodes)
    # variables with a literal value go on the command line; the others are named
    env = "".join(f"{s.key.value}={s.value} " for s in nccl if not str(s.value).startswith("<"))
    where = (
        f"--nnodes {nodes} --nproc-per-node {per_node} --rdzv-backend c10d "
        "--rdzv-endpoint HOST:29500"
        if nodes > 1
        else f"--nproc-per-node {count}"
    )
    return f"{env}torchrun {where} your_script.py", nodes


def _slurm_torch(hardware: HardwareInfo, named: str) -> list[Setting]:
    """The process group srun's tasks start: as under torchrun, from SLURM's variables
    (the adapter exports them as RANK, WORLD_SIZE, MASTER_ADDR... for ``env://``)."""
    launcher = hardware.launcher
    backend = "nccl" if hardware.gpus else "gloo"
    out = [
        Setting(
            Key.TORCH_PROCESS_GROUP,
            backend,
            f"SLURM's srun started {launcher.world_size} tasks on {launcher.nodes} "
            f"node(s) (SLURM_NTASKS, SLURM_PROCID): a {backend} process group at "
            f"{launcher.master_addr}:{launcher.master_port}; {named} in accelkit.torch.fit",
        )
    ]
    if hardware.gpus:
        local = launcher.local_rank or 0
        device = local % hardware.gpu_count  # srun may bind one GPU per task
        out.append(
            Setting(
                Key.TORCH_DEVICE,
                device,
                f"each task drives the GPU of its SLURM_LOCALID ({local}) among the "
                f"{hardware.gpu_count} it sees, so tasks do not share GPU 0",
            )
        )
    return out


def _launch(hardware: HardwareInfo, named: str) -> Setting:
    """The torchrun command for GPUs visible to one process, with the NCCL variables the
    launched run will get: `nccl_settings` for the same GPUs under that launch, so the
    advice and the launched plan are one decision."""
    count = hardware.gpu_count
    command, nodes = _torchrun(hardware)
    nccl = nccl_settings(hardware, nodes=nodes)
    if nodes > 1:
        seen = (
            f"{count} GPUs span {nodes} servers of up to {hardware.server_gpus}: run this on "
            f"each, HOST being the first server, for {named}"
        )
    else:
        seen = (
            f"{count} GPUs visible but one process: relaunch under torchrun for "
            f"{named} (DataParallel is slower and single-process)"
        )
    launched = (
        (
            "; the launched run's plan has "
            + "; ".join(f"{s.key.value}={s.value} ({s.reason})" for s in nccl)
        )
        if nccl
        else ""
    )
    return Setting(Key.LAUNCH, command, seen + launched)


def nccl_settings(hardware: HardwareInfo, nodes: int | None = None) -> list[Setting]:
    """NCCL variables the topology calls for; none where NCCL's defaults are right.

    Never one in `NEVER_SET` (NVLink multicast stays NCCL's own choice).

    Args:
        hardware: the GPUs, their links and the launcher.
        nodes: servers the run spans; default: the launcher's count. The launch advice
            of a run not yet launched passes the servers it will span.

    Example:
        >>> from accelkit import what_if
        >>> [s.key.value for s in nccl_settings(what_if("RTX 4090", 2))]
        ['NCCL_P2P_DISABLE']
    """
    nodes = hardware.launcher.nodes if nodes is None else nodes
    out: list[Setting] = []
    blocked = [(link.a, link.b) for link in hardware.links if link.p2p is False]
    if blocked:
        # a what-if's links are the datasheet's (`what_if`), a detected machine's NVML's
        seen = "the datasheet" if hardware.source == WHAT_IF else "NVML"
        bridged = [(link.a, link.b) for link in hardware.links if link.nvlink and link.p2p]
        unused = (
            f"; the NVLink between GPUs {_pairs(bridged)} goes unused too (NCCL_P2P_DISABLE "
            "turns off every P2P path)"
            if bridged
            else ""
        )
        out.append(
            Setting(
                Key.NCCL_P2P_DISABLE,
                "1",
                f"no peer-to-peer access between GPUs {_pairs(blocked)} ({seen}): NCCL goes "
                "through host memory instead of trying P2P, which hangs on e.g. GeForce "
                f"RTX 40-series{unused}",
            )
        )
    if nodes > 1 and not hardware.infiniband:
        out.append(Setting(Key.NCCL_SOCKET_IFNAME, "<fast interface>", _sockets(hardware, nodes)))
    return out


def _sockets(hardware: HardwareInfo, nodes: int) -> str:
    """Why a run over `nodes` servers without InfiniBand names NCCL's socket interface."""
    pick = (
        "set NCCL_SOCKET_IFNAME to the fastest interface (e.g. 'eth0') so it does not "
        "pick a slow or unreachable one"
    )
    if hardware.nvlink_across_servers:
        return (
            f"{nodes} servers of one NVLink domain of up to {hardware.nvlink_domain}: NCCL's "
            "collectives cross them over NVLink (multi-node NVLink), its bootstrap over TCP "
            f"sockets; {pick}"
        )
    return f"{nodes} nodes and no InfiniBand device: NCCL uses TCP sockets; {pick}"


def _pairs(pairs: list[tuple[int, int]]) -> str:
    """GPU pairs for a reason: the first four, then "..."."""
    return ", ".join(f"{a}-{b}" for a, b in pairs[:4]) + (" ..." if len(pairs) > 4 else "")
