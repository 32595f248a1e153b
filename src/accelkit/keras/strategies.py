"""The `tf.distribute.Strategy` a TensorFlow plan names, and what a fit needs to know
of a strategy (replicas, multi-worker, this worker's rank).

`strategy(plan)` builds `MirroredStrategy` with the plan's cross-device ops, or
`MultiWorkerMirroredStrategy` from TF_CONFIG with a bounded wait for the other
workers (``ACCELKIT_DIST_TIMEOUT``), once per process and kind.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

from accelkit.configure import current_plan
from accelkit.hardware.environment import TIMEOUT_ENV, dist_timeout
from accelkit.planning.keys import CrossDevice, Key
from accelkit.planning.types import Distribution, Framework, Plan
from accelkit.profiling import world
from accelkit.profiling.run_report import RunReport
from accelkit.utils.imports import require


def _tf() -> Any:
    return require("tensorflow")


# A multi-worker strategy can be created once per process, so strategies are cached
# by what they are.
_strategies: dict[tuple[str, str], Any] = {}


def strategy(plan: Plan | None = None) -> Any:
    """The `tf.distribute.Strategy` the plan names, built over the devices TensorFlow sees.

    Built once per process and kind:

    - MIRRORED: `MirroredStrategy` over the local GPUs with the plan's cross-device
      ops (NCCL all-reduce, or hierarchical copy where GPUs lack peer access). With
      no GPU but two or more logical CPU devices (`tf.config.set_logical_device_configuration`)
      it mirrors over those with `ReductionToOneDevice`, which runs on CPUs. Fewer
      devices than that (a what-if plan): the default strategy, with a warning.
    - MULTI_WORKER_MIRRORED: `MultiWorkerMirroredStrategy` from `TF_CONFIG` (NCCL
      between GPUs, RING on CPUs). A worker that waits longer than
      ``ACCELKIT_DIST_TIMEOUT`` seconds (default 600) for the others to join raises
      RuntimeError instead of hanging; so does a port of TF_CONFIG already in use.

    Args:
        plan: a TensorFlow plan; default: the last `auto_configure()` plan, or the
            default strategy when there is none.

    Example:
        >>> import accelkit
        >>> import keras
        >>> plan = accelkit.auto_configure(framework="tensorflow", verbose=False)
        >>> with accelkit.keras.strategy(plan).scope():
        ...     model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        ...     model.compile(optimizer="adam", loss="mse")
    """
    plan = plan if plan is not None else current_plan("tensorflow")
    if plan is None or plan.framework is not Framework.TENSORFLOW:
        return _tf().distribute.get_strategy()
    key = (plan.distribution.value, str(plan.value(Key.TF_STRATEGY, "")))
    if key not in _strategies:
        _strategies[key] = _build_strategy(plan)
    return _strategies[key]


def _build_strategy(plan: Plan) -> Any:
    tf = _tf()
    if plan.distribution is Distribution.MULTI_WORKER_MIRRORED:
        return _multi_worker_strategy(plan)
    if plan.distribution is Distribution.MIRRORED:
        gpus = tf.config.list_logical_devices("GPU")
        if len(gpus) >= 2:
            hierarchical = plan.value(Key.TF_STRATEGY) == CrossDevice.HIERARCHICAL_COPY
            ops = (
                tf.distribute.HierarchicalCopyAllReduce()
                if hierarchical
                else tf.distribute.NcclAllReduce()
            )
            return tf.distribute.MirroredStrategy([g.name for g in gpus], cross_device_ops=ops)
        cpus = tf.config.list_logical_devices("CPU")
        if not gpus and len(cpus) >= 2:
            # NCCL and hierarchical copy need GPUs; reducing on one device works anywhere.
            return tf.distribute.MirroredStrategy(
                [c.name for c in cpus], cross_device_ops=tf.distribute.ReductionToOneDevice()
            )
        warnings.warn(
            f"the plan asks for MirroredStrategy but TensorFlow sees {len(gpus)} "
            "GPU(s) here; using the default strategy",
            stacklevel=3,
        )
    return tf.distribute.get_strategy()


def cluster_resolver(plan: Plan) -> Any:
    """The cluster resolver of a multi-worker plan: TF_CONFIG's, or under SLURM's srun
    (no TF_CONFIG) `SlurmClusterResolver`'s cluster: one worker per task of the step, on
    its nodes, ports from 8888 up on each node.

    A node's GPUs, all visible to each of its tasks, are shared out by
    `SlurmClusterResolver` (it sets CUDA_VISIBLE_DEVICES). GPUs SLURM already bound to the
    task (CUDA_VISIBLE_DEVICES set), or none, are used as they are: the resolver then only
    places the tasks, since it cannot count zero GPUs or GPUs it does not see.
    """
    resolvers = _tf().distribute.cluster_resolver
    launcher, gpus = plan.hardware.launcher, plan.hardware.gpu_count
    if not launcher.slurm or launcher.tf_config:
        return resolvers.TFConfigClusterResolver()
    if gpus and launcher.cuda_visible_devices is None:
        return resolvers.SlurmClusterResolver(gpus_per_node=gpus)
    placed = resolvers.SlurmClusterResolver(
        gpus_per_node=launcher.world_size, gpus_per_task=1, auto_set_gpu=False
    )
    return resolvers.SimpleClusterResolver(
        placed.cluster_spec(),
        task_type=placed.task_type,
        task_id=placed.task_id,
        num_accelerators={"GPU": gpus} if gpus else {},
        rpc_layer="grpc",
    )


def _multi_worker_strategy(plan: Plan) -> Any:
    """MultiWorkerMirroredStrategy from TF_CONFIG (or SLURM's variables), failing with a
    clear error, never hanging.

    TensorFlow waits without limit for every worker of TF_CONFIG to register with
    the coordination service (the leader is the chief, else worker 0). accelkit
    configures that service as TensorFlow would, plus a registration barrier
    bounded by ``ACCELKIT_DIST_TIMEOUT``. A worker that dies later is caught by the
    service's heartbeats (an UnavailableError in every other worker). A per-collective
    timeout is set only when the variable is set: TensorFlow spends a thread per
    collective on it (`tf.distribute.experimental.CommunicationOptions`).
    """
    tf = _tf()
    timeout, note, explicit = dist_timeout()
    if note:
        warnings.warn(f"accelkit: {note}", stacklevel=3)
    resolver = cluster_resolver(plan)
    cluster = resolver.cluster_spec()
    source = "TF_CONFIG" if plan.hardware.launcher.tf_config else "SLURM"
    task = f"{source} task {resolver.task_type}:{resolver.task_id}"
    workers = sum(len(cluster.job_tasks(job)) for job in cluster.jobs if job in ("chief", "worker"))
    if resolver.task_type is not None and resolver.task_id is not None:
        _check_port_free(cluster.task_address(resolver.task_type, resolver.task_id), task)
    _bound_registration(resolver, timeout)
    communication = tf.distribute.experimental.CommunicationImplementation
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=(
            communication.NCCL if tf.config.list_physical_devices("GPU") else communication.RING
        ),
        timeout_seconds=timeout if explicit else None,
    )
    try:
        return tf.distribute.MultiWorkerMirroredStrategy(
            cluster_resolver=resolver, communication_options=options
        )
    except tf.errors.DeadlineExceededError as error:
        raise RuntimeError(
            f"accelkit: {task} waited {timeout:g} s ({TIMEOUT_ENV}) for the {workers} "
            f"workers of {source} to join, and some never did: start every worker {source} "
            "lists (each with its own task index), check that their addresses and ports are "
            f"reachable from here, or raise {TIMEOUT_ENV} if they start late. TensorFlow said: "
            f"{_message(error)}"
        ) from error
    except tf.errors.UnknownError as error:
        if "gRPC server" not in str(error):
            raise
        address = cluster.task_address(resolver.task_type, resolver.task_id)
        raise RuntimeError(
            f"accelkit: {task} could not listen on {address}: the port "
            "is in use or the address is not this machine's. Free the port or give this "
            "worker another one in every worker's TF_CONFIG."
        ) from error


def _check_port_free(address: str, task: str) -> None:
    """Raise a clear RuntimeError when another process listens on this worker's port."""
    import socket

    port_text = address.rsplit(":", 1)[-1]
    if not port_text.isdigit():
        return
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        # SO_REUSEADDR: a port left in TIME_WAIT by an earlier run is free for the server.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("", int(port_text)))
    except OSError as error:
        raise RuntimeError(
            f"accelkit: {task} cannot listen on {address}: {error.strerror} "
            "(another process holds the port, perhaps an earlier run still alive). Stop it, or "
            "give this worker a free port in every worker's TF_CONFIG."
        ) from None
    finally:
        probe.close()


def _bound_registration(resolver: Any, timeout: float) -> None:
    """Configure TensorFlow's coordination service as MultiWorkerMirroredStrategy does,
    with every worker's registration due within `timeout` seconds.

    Uses TensorFlow internals (no public API sets this); if they moved, the strategy
    is built with TensorFlow's own settings and a warning says the wait is unbounded.
    """
    try:
        from tensorflow.python.distribute import collective_all_reduce_strategy as cars
        from tensorflow.python.distribute import multi_worker_util
        from tensorflow.python.eager import context

        ctx = context.context()
        if ctx.coordination_service is not None or resolver.task_type not in ("chief", "worker"):
            return
        cluster = multi_worker_util.normalize_cluster_spec(resolver.cluster_spec())
        jobs = [
            cars.coordination_config_pb2.CoordinatedJob(name=job, num_tasks=cluster.num_tasks(job))
            for job in ("chief", "worker")
            if job in cluster.jobs
        ]
        ctx.configure_coordination_service(
            service_type="standalone",
            service_leader=multi_worker_util.coordination_leader(cluster),
            coordinated_jobs=jobs,
            cluster_register_timeout_in_ms=int(timeout * 1000),
        )
        ctx._coordination_service_config.cluster_register_with_barrier = True
    except Exception as error:  # noqa: BLE001 - the strategy still builds without the bound
        warnings.warn(
            f"accelkit: could not bound the wait for the other workers "
            f"({type(error).__name__}: {error}); a worker that never starts makes "
            "this one wait indefinitely",
            stacklevel=4,
        )


def _message(error: Exception) -> str:
    return (getattr(error, "message", None) or str(error)).strip() or type(error).__name__


def forget() -> list[Any]:
    """Drop the strategies built so far, so the next `strategy(plan)` builds anew; return them.

    It cannot undo a MultiWorkerMirroredStrategy: TensorFlow lets a process join one
    cluster only, so building another one afterwards still fails.

    Example:
        >>> built = forget()   # e.g. before a test that checks which strategy a plan builds
    """
    built = list(_strategies.values())
    _strategies.clear()
    return built


def built_for_a_plan(strategy: Any) -> bool:
    """True when `strategy` is one `strategy(plan)` built in this process."""
    return any(strategy is built for built in _strategies.values())


def is_multi_worker(strategy: Any) -> bool:
    """True for a MultiWorkerMirroredStrategy spanning more than one worker."""
    tf = _tf()
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return False
    in_multi_worker = getattr(strategy.extended, "_in_multi_worker_mode", None)
    return bool(in_multi_worker()) if callable(in_multi_worker) else True


def local_replicas(strategy: Any) -> int:
    """Replicas this process drives (all of them, except under MultiWorkerMirroredStrategy)."""
    try:
        return max(len(strategy.extended.worker_devices), 1)
    except (RuntimeError, AttributeError, NotImplementedError):  # the default strategy
        return int(strategy.num_replicas_in_sync)


def worker_rank(strategy: Any) -> int:
    """This worker's index in the cluster: the chief first, then the workers in order."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or resolver.task_type is None:
        return 0
    jobs = resolver.cluster_spec().jobs
    if resolver.task_type == "chief":
        return 0
    return int(resolver.task_id) + (1 if "chief" in jobs else 0)


# What each worker sends the others at the end of a multi-worker fit, in this order.
_FIGURES = (
    "rank",
    "devices",
    "steady_samples",
    "steady_seconds",
    "steady_steps",
    "samples_per_second",
    "step_time_s",
    "input_wait_share",
)


def gather_figures(strategy: Any, figures: dict[str, Any]) -> list[dict[str, Any]]:
    """Every worker's `figures` (`accelkit.profiling.world.rank_figures`), by rank.

    An all-gather of one fixed-size float64 vector per replica; every worker of the
    cluster runs it at the end of its fit, as it ran every step together. Raises what
    the collective raises.
    """
    tf = _tf()
    row = tf.constant([[_number(figures[name]) for name in _FIGURES]], tf.float64)
    values = strategy.experimental_distribute_values_from_function(lambda _: row)
    gathered = strategy.gather(values, axis=0).numpy()
    ranks: dict[int, dict[str, Any]] = {}
    for row_values in gathered:
        entry: dict[str, Any] = {
            name: _from_number(value) for name, value in zip(_FIGURES, row_values, strict=True)
        }
        rank = int(entry["rank"])
        if rank in ranks:  # one row per replica: a worker with several devices sent several
            continue
        entry.update(
            rank=rank,
            devices=int(entry["devices"] or 1),
            steady_samples=int(entry["steady_samples"] or 0),
            steady_steps=int(entry["steady_steps"] or 0),
            device=figures["device"] if rank == figures["rank"] else None,
        )
        ranks[rank] = entry
    return [ranks[r] for r in sorted(ranks)]


def gather_world(
    report: RunReport, strategy: Any, samples: int, replicas: int, *, interrupted: bool
) -> list[dict[str, Any]] | None:
    """Every worker's figures for `report` (world_size, ranks, global samples/s), or None
    with a note in `report` when they cannot be had.

    An all-gather of one fixed-size float64 vector per replica; every worker of
    the cluster runs it at the end of its fit, as it ran every step together.
    """
    if interrupted:
        report.note("ranks", "the fit was interrupted: other workers' figures not gathered")
        return None
    figures = world.rank_figures(report, worker_rank(strategy), samples, replicas)
    try:
        return gather_figures(strategy, figures)
    except Exception as error:  # noqa: BLE001 - the local figures still stand
        report.note(
            "ranks",
            f"other workers' figures could not be gathered: "
            f"{type(error).__name__}: {str(error).strip()[:200]}",
        )
        return None


def _number(value: Any) -> float:
    return float("nan") if value is None else float(value)


def _from_number(value: float) -> float | None:
    return None if math.isnan(value) else float(value)  # NaN stands for "not measured"
