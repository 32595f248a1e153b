"""Applies a plan to TensorFlow and Keras 3: one small function per technique.

Imported only when a TensorFlow plan is applied or a Keras helper is used.
"""

from __future__ import annotations

import os
from typing import Any

from accelkit.frameworks._common import Outcome, apply_env, is_ours, set_by_us, walk
from accelkit.planning.types import Distribution, Plan, Setting, Status
from accelkit.utils.imports import require

_POLICY_KEY = "keras.mixed_precision.global_policy"


def _tf() -> Any:
    return require("tensorflow")


def _keras() -> Any:
    return require("keras")


def apply(plan: Plan) -> Plan:
    """Apply every TensorFlow setting of `plan`; returns the plan with outcomes recorded."""
    _tf()
    return walk(plan, {
        _POLICY_KEY: apply_mixed_precision,
        "tf.config.experimental.enable_tensor_float_32_execution": apply_tf32,
        "tf.config.experimental.set_memory_growth": apply_memory_growth,
        "TF_GPU_THREAD_MODE": apply_thread_mode,
    }, framework="tensorflow")


def _gpus_initialised() -> bool:
    """True once TensorFlow has created its devices (its start-up variables are read then)."""
    from tensorflow.python.eager import context

    return context.context()._context_handle is not None  # noqa: SLF001 - no public API


def apply_mixed_precision(setting: Setting) -> Outcome:
    """Set the Keras global dtype policy; layers built from now on follow it."""
    keras = _keras()
    current = keras.mixed_precision.global_policy().name
    if current == setting.value:
        return Status.ALREADY_SET, f"policy {current!r}"
    if current != "float32" and not is_ours(setting.key, current):
        return Status.KEPT_USER_VALUE, f"policy {current!r} set by the user"
    keras.mixed_precision.set_global_policy(setting.value)
    set_by_us(setting.key, setting.value)
    return Status.APPLIED, "models built before this call keep their old policy"


def apply_tf32(setting: Setting) -> Outcome:
    tf = _tf()
    if tf.config.experimental.tensor_float_32_execution_enabled() == bool(setting.value):
        return Status.ALREADY_SET, "TensorFlow's default" if setting.value else ""
    tf.config.experimental.enable_tensor_float_32_execution(bool(setting.value))
    return Status.APPLIED, ""


def apply_memory_growth(setting: Setting) -> Outcome:
    tf = _tf()
    user = os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH")
    if user is not None and user.lower() != "true":
        return Status.KEPT_USER_VALUE, f"TF_FORCE_GPU_ALLOW_GROWTH={user!r} set by the user"
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return Status.NOT_APPLICABLE, "TensorFlow sees no GPU in this process"
    if all(tf.config.experimental.get_memory_growth(gpu) for gpu in gpus):
        return Status.ALREADY_SET, f"on for {len(gpus)} GPU(s)"
    try:
        for gpu in gpus:
            tf.config.experimental.set_memory_growth(gpu, True)
    except RuntimeError:
        return Status.FAILED, ("TensorFlow has already initialised its GPUs; call "
                               "auto_configure() before creating models or tensors. The run "
                               "goes on with TensorFlow's default (all memory mapped)")
    return Status.APPLIED, f"on for {len(gpus)} GPU(s)"


def apply_thread_mode(setting: Setting) -> Outcome:
    status, detail = apply_env(setting.key, str(setting.value))
    if status is Status.APPLIED and _gpus_initialised():
        return Status.FAILED, ("TensorFlow has already started and read its variables; "
                               "export it in the shell to take effect")
    return status, detail


# -- helpers -----------------------------------------------------------------------

TIMEOUT_ENV = "ACCELKIT_DIST_TIMEOUT"
DEFAULT_TIMEOUT_S = 600.0

# A multi-worker strategy can be created once per process, so strategies are cached
# by what they are.
_strategies: dict[tuple[str, str], Any] = {}


def strategy(plan: Plan) -> Any:
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

    Example:
        >>> plan = accelkit.auto_configure(framework="tensorflow")
        >>> with plan.strategy.scope():
        ...     model = build_and_compile_model()
    """
    setting = plan.get("tf.distribute.Strategy")
    key = (plan.distribution.value, "" if setting is None else str(setting.value))
    if key not in _strategies:
        _strategies[key] = _build_strategy(plan)
    return _strategies[key]


def _build_strategy(plan: Plan) -> Any:
    tf = _tf()
    if plan.distribution is Distribution.MULTI_WORKER_MIRRORED:
        return _multi_worker_strategy()
    if plan.distribution is Distribution.MIRRORED:
        gpus = tf.config.list_logical_devices("GPU")
        if len(gpus) >= 2:
            setting = plan.get("tf.distribute.Strategy")
            hierarchical = setting is not None and "Hierarchical" in str(setting.value)
            ops = (tf.distribute.HierarchicalCopyAllReduce() if hierarchical
                   else tf.distribute.NcclAllReduce())
            return tf.distribute.MirroredStrategy([g.name for g in gpus], cross_device_ops=ops)
        cpus = tf.config.list_logical_devices("CPU")
        if not gpus and len(cpus) >= 2:
            # NCCL and hierarchical copy need GPUs; reducing on one device works anywhere.
            return tf.distribute.MirroredStrategy(
                [c.name for c in cpus], cross_device_ops=tf.distribute.ReductionToOneDevice())
        import warnings

        warnings.warn(f"the plan asks for MirroredStrategy but TensorFlow sees {len(gpus)} "
                      "GPU(s) here; using the default strategy", stacklevel=3)
    return tf.distribute.get_strategy()


def distribution_timeout() -> tuple[float, bool]:
    """(seconds, set by the user) from ``ACCELKIT_DIST_TIMEOUT``; 600 s when unset.

    Raises:
        ValueError: the variable is not a positive number of seconds.
    """
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_TIMEOUT_S, False
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise ValueError(f"{TIMEOUT_ENV}={text!r} is not valid; use a positive number of "
                         f"seconds (default {DEFAULT_TIMEOUT_S:g})")
    return seconds, True


def _multi_worker_strategy() -> Any:
    """MultiWorkerMirroredStrategy from TF_CONFIG, failing with a clear error, never hanging.

    TensorFlow waits without limit for every worker of TF_CONFIG to register with
    the coordination service (the leader is the chief, else worker 0). accelkit
    configures that service as TensorFlow would, plus a registration barrier
    bounded by ``ACCELKIT_DIST_TIMEOUT``. A worker that dies later is caught by the
    service's heartbeats (an UnavailableError in every other worker). A per-collective
    timeout is set only when the variable is set: TensorFlow spends a thread per
    collective on it (`tf.distribute.experimental.CommunicationOptions`).
    """
    tf = _tf()
    timeout, explicit = distribution_timeout()
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    cluster = resolver.cluster_spec()
    task = f"TF_CONFIG task {resolver.task_type}:{resolver.task_id}"
    workers = sum(len(cluster.job_tasks(job)) for job in cluster.jobs
                  if job in ("chief", "worker"))
    if resolver.task_type is not None and resolver.task_id is not None:
        _check_port_free(cluster.task_address(resolver.task_type, resolver.task_id), task)
    _bound_registration(resolver, timeout)
    communication = tf.distribute.experimental.CommunicationImplementation
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=(communication.NCCL if tf.config.list_physical_devices("GPU")
                        else communication.RING),
        timeout_seconds=timeout if explicit else None)
    try:
        return tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver,
                                                         communication_options=options)
    except tf.errors.DeadlineExceededError as error:
        raise RuntimeError(
            f"accelkit: {task} waited {timeout:g} s ({TIMEOUT_ENV}) for the {workers} "
            "workers of TF_CONFIG to join, and some never did: start every worker TF_CONFIG "
            "lists (each with its own task index), check that their addresses and ports are "
            f"reachable from here, or raise {TIMEOUT_ENV} if they start late. TensorFlow said: "
            f"{_message(error)}") from error
    except tf.errors.UnknownError as error:
        if "gRPC server" not in str(error):
            raise
        address = cluster.task_address(resolver.task_type, resolver.task_id)
        raise RuntimeError(
            f"accelkit: {task} could not listen on {address}: the port "
            "is in use or the address is not this machine's. Free the port or give this "
            "worker another one in every worker's TF_CONFIG.") from error


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
            "give this worker a free port in every worker's TF_CONFIG.") from None
    finally:
        probe.close()


def _bound_registration(resolver: Any, timeout: float) -> None:
    """Configure TensorFlow's coordination service as MultiWorkerMirroredStrategy does,
    with every worker's registration due within `timeout` seconds.

    Uses TensorFlow internals (no public API sets this); if they moved, the strategy
    is built with TensorFlow's own settings and a warning says the wait is unbounded.
    """
    import warnings

    try:
        from tensorflow.python.distribute import collective_all_reduce_strategy as cars
        from tensorflow.python.distribute import multi_worker_util
        from tensorflow.python.eager import context

        ctx = context.context()
        if ctx.coordination_service is not None or resolver.task_type not in ("chief", "worker"):
            return
        cluster = multi_worker_util.normalize_cluster_spec(resolver.cluster_spec())
        jobs = [cars.coordination_config_pb2.CoordinatedJob(name=job,
                                                            num_tasks=cluster.num_tasks(job))
                for job in ("chief", "worker") if job in cluster.jobs]
        ctx.configure_coordination_service(
            service_type="standalone",
            service_leader=multi_worker_util.coordination_leader(cluster),
            coordinated_jobs=jobs,
            cluster_register_timeout_in_ms=int(timeout * 1000))
        ctx._coordination_service_config.cluster_register_with_barrier = True  # noqa: SLF001
    except Exception as error:  # noqa: BLE001 - the strategy still builds without the bound
        warnings.warn(f"accelkit: could not bound the wait for the other workers "
                      f"({type(error).__name__}: {error}); a worker that never starts makes "
                      "this one wait indefinitely", stacklevel=4)


def _message(error: Exception) -> str:
    return (getattr(error, "message", None) or str(error)).strip() or type(error).__name__


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


def float32_head(model: Any) -> Any:
    """Return `model` with float32 outputs under a mixed policy.

    Softmax and losses computed in float16/bfloat16 lose precision, so the
    outputs are cast back to float32 (TensorFlow mixed-precision guide). A
    model whose outputs are already float32 is returned unchanged; otherwise
    a functional model is wrapped with a float32 `Activation('linear')` per
    output, and a subclassed model in a small wrapper that casts.

    Example:
        >>> model = accelkit.keras.float32_head(model)
        >>> model.output.dtype
        'float32'
    """
    keras = _keras()
    if outputs_float32(model):
        return model
    inputs, outputs = _symbolic_io(model)
    if inputs and outputs:
        cast = [keras.layers.Activation("linear", dtype="float32", name=f"float32_head_{i}")(o)
                for i, o in enumerate(outputs)]
        return keras.Model(inputs, cast if len(cast) > 1 else cast[0], name=model.name)
    return _Float32Head(model)


def outputs_float32(model: Any) -> bool:
    """True when a functional model's outputs are all float32 (False when unknown)."""
    _, outputs = _symbolic_io(model)
    return bool(outputs) and all(_dtype_name(o) == "float32" for o in outputs)


def _symbolic_io(model: Any) -> tuple[Any, Any]:
    try:
        return getattr(model, "inputs", None), model.outputs
    except (AttributeError, ValueError):  # subclassed models have no symbolic outputs
        return None, None


def _dtype_name(tensor: Any) -> str:
    dtype = tensor.dtype
    return getattr(dtype, "name", str(dtype))


def _float32_head_class() -> type:
    keras = _keras()

    class Float32Head(keras.Model):
        """Calls the wrapped model and casts its outputs to float32."""

        def __init__(self, inner: Any, **kwargs: Any) -> None:
            super().__init__(name=f"{inner.name}_float32_head", **kwargs)
            self.inner = inner

        def call(self, *args: Any, **kwargs: Any) -> Any:
            outputs = self.inner(*args, **kwargs)
            return keras.tree.map_structure(lambda t: keras.ops.cast(t, "float32"), outputs)

    return Float32Head


def _Float32Head(model: Any) -> Any:  # noqa: N802 - reads as the class it builds
    return _float32_head_class()(model)
