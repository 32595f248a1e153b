"""`accelkit.keras.fit`: `model.fit` with the plan's helpers and a `RunReport`."""

from __future__ import annotations

import inspect
import logging
import re
import warnings
from contextlib import nullcontext
from typing import Any

import keras
import tensorflow as tf

from accelkit.configure import auto_configure, current_plan
from accelkit.frameworks.keras_train_step import overrides_training
from accelkit.hardware.environment import dist_timeout
from accelkit.keras import _multi_worker, checks, strategies
from accelkit.keras.callback import SINGLE_DEVICE, ProfileCallback, measurement_options
from accelkit.keras.facts import input_facts
from accelkit.keras.head import outputs_float32, with_float32_head
from accelkit.keras.policy_notes import add_policy_note
from accelkit.planning import Distribution, Plan
from accelkit.profiling.run_report import RunReport
from accelkit.utils.arguments import renamed

_log = logging.getLogger("accelkit")


def fit(
    model: Any,
    x: Any = None,
    y: Any = None,
    *fit_args: Any,
    plan: Plan | None = None,
    allow_float_ids: bool = False,
    single_device_samples_per_second: float | RunReport | str | None = None,
    **kwargs: Any,
) -> RunReport:
    """Run `model.fit(x, y, *fit_args, **kwargs)` measured, and return its `RunReport`.

    Every `model.fit` argument passes through, positional or by name (`batch_size`,
    `epochs`, `validation_data`, `callbacks`, ...); the measurement options
    (``warmup=``, ``window=``, ...) go to `ProfileCallback`. The report stands in for
    the `History` that `model.fit` returns: `report.history["loss"]`, `report.epoch`,
    `report.params`; `report.trained_model` is the model trained. Under a mixed policy, a
    functional or Sequential model whose outputs are not float32 gets a float32 head
    (`float32_head`: the last activation computed in float32) and is compiled again with
    the same optimizer, loss and metrics: the report says so. A subclassed model, or one
    with its own `train_step`, trains as it is (`ProfileCallback` checks its outputs and
    its loss scaling).
    A KeyboardInterrupt ends the fit early with a partial report
    (`report.interrupted`); any other error propagates unchanged after the GPU
    sampler has stopped.

    Several devices: give a function that builds and compiles the model, and it is
    called inside `accelkit.keras.strategy(plan).scope()` (MirroredStrategy over the local GPUs, or
    MultiWorkerMirroredStrategy under TF_CONFIG); `batch_size` is then the global
    batch, split across the replicas. A model built outside that scope trains as
    built, on one device per process, with a warning saying how to distribute it.
    Under MultiWorkerMirroredStrategy every worker runs the same call, and each
    worker's report covers the whole cluster (`world_size`, `ranks`,
    `global_samples_per_second`).

    Args:
        model: a compiled Keras model, or a function without arguments that builds and
            compiles one (needed to train on several devices).
        x, y, fit_args: as for `model.fit`.
        plan: the plan in force; defaults to the last `auto_configure()` plan, or calls
            `auto_configure(framework="tensorflow")` when there is none.
        allow_float_ids: train a model whose token ids pass through a 16-bit float
            (reported as a critical verdict instead of refused).
        kwargs: `model.fit`'s, and the measurement options of `ProfileCallback`
            (`accelkit.profiling.options`: ``flops_per_step``, ``tokens_per_sample``,
            ``warmup``, ``window``, ``sample_gpu``, ``calibrate``, ``single_device``;
            ``single_device_samples_per_second=`` is the last one's former name).

    Training figures come from the training steps alone: validation
    (``validation_data``, ``validation_split``) and the epochs' boundaries are
    reported beside them (`report.evaluation_seconds`, `report.other_seconds`).

    Raises:
        ValueError: the model (or the one the function returned) is not compiled.
        accelkit.keras.checks.UnsafeMixedPrecision: (a ValueError) token ids reach an
            `Embedding` through a 16-bit float, which rounds them (float16 holds integers
            exactly only up to 2048): declare the input ``dtype="int32"``, or pass
            ``allow_float_ids=True`` to train anyway.
        TypeError: the function returned something other than a `keras.Model`, or the
            arguments do not fit `model.fit`.
        RuntimeError: under TF_CONFIG, the workers did not all join within
            ``ACCELKIT_DIST_TIMEOUT`` seconds, or this worker's port is taken.

    Example:
        >>> import accelkit
        >>> import keras
        >>> import numpy as np
        >>> plan = accelkit.auto_configure(framework="tensorflow", verbose=False)
        >>> def build():
        ...     model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
        ...     model.compile(optimizer="adam",
        ...                   loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        ...     return model
        >>> x, y = np.random.rand(256, 4), np.random.randint(0, 3, 256)
        >>> report = accelkit.keras.fit(build, x, y, epochs=3, verbose=0,   # on every GPU
        ...                             validation_split=0.25, window=10)
        >>> len(report.history["loss"]), report.epochs  # as model.fit's History
        (3, 3)
        >>> report.evaluation_seconds > 0               # validation: not training time
        True
    """
    plan = (
        plan or current_plan("tensorflow") or auto_configure(framework="tensorflow", verbose=False)
    )
    options = measurement_options(kwargs)  # checked here, before the model is built
    single_device = options.pop("single_device", None)
    callback = ProfileCallback(
        plan,
        allow_float_ids=allow_float_ids,
        single_device=renamed(single_device, single_device_samples_per_second, SINGLE_DEVICE),
        **options,
    )
    model, notes = _prepare(model, plan)
    # Token ids rounded by a 16-bit policy train a wrong model without an error: refuse.
    checks.check_before_training(model, allow_float_ids=allow_float_ids)
    callback.facts["loader"] = input_facts(x)
    arguments = _fit_arguments(model, x, y, fit_args, kwargs)
    _check_epochs(arguments.get("epochs", 1), arguments.get("initial_epoch", 0))
    history = _train(model, callback, arguments)
    report = callback.finish()
    if report.steps == 0 and not report.interrupted:
        raise ValueError(
            "the training data yielded no batch: give x (and y) with at least one "
            "sample, or a dataset, generator or PyDataset that yields a batch"
        )
    _keep_history(report, history if history is not None else model.history, model)
    report.notes.update(notes)
    return report


def _keep_history(report: RunReport, history: Any, model: Any) -> None:
    """What `History` holds, as plain data in the report (an interrupted fit: what
    Keras recorded so far)."""
    report.trained_model = model
    if history is None:
        return
    report.history = {
        name: [float(v) for v in values]
        for name, values in (getattr(history, "history", None) or {}).items()
    }
    report.epoch = [int(e) for e in getattr(history, "epoch", None) or ()]
    report.params = dict(getattr(history, "params", None) or {})


def _prepare(model: Any, plan: Plan) -> tuple[Any, dict[str, str]]:
    """The compiled model to train and notes on what was done to it: built in the plan's
    strategy scope (`model` a function), checked against the plan's strategy (`model` a
    model), given a float32 head under a mixed policy."""
    notes = {}
    if _is_builder(model):
        model = _build_in_scope(model, plan)
    else:
        _check_compiled(model)
        note = _check_strategy(model, plan)
        if note:
            notes["distribution"] = note
    if keras.mixed_precision.global_policy().compute_dtype != "float32":
        with model.distribute_strategy.scope():
            model, note = _with_float32_head(model)
        if note:
            notes["model"] = note
    if strategies.is_multi_worker(model.distribute_strategy):
        notes["distribution"] = _multi_worker.NOTE
    return model, notes


def _fit_arguments(
    model: Any, x: Any, y: Any, fit_args: tuple[Any, ...], fit_kwargs: dict[str, Any]
) -> dict[str, Any]:
    """`model.fit`'s arguments by name, as Keras would bind them."""
    try:
        bound = inspect.signature(model.fit).bind(x, y, *fit_args, **fit_kwargs)
    except TypeError as error:
        raise TypeError(
            f"accelkit.keras.fit passes these arguments to {model.name}.fit: {error}"
        ) from None
    return dict(bound.arguments)


def _check_epochs(epochs: Any, initial_epoch: Any) -> None:
    """Refuse a fit that would train no epoch (Keras runs none and returns quietly)."""
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs={epochs!r}: give a whole number of epochs >= 1")
    if (
        isinstance(initial_epoch, int)
        and not isinstance(initial_epoch, bool)
        and epochs <= initial_epoch
    ):
        raise ValueError(
            f"epochs={epochs} must be greater than initial_epoch={initial_epoch} "
            "(epochs is the index of the last epoch, not a count from initial_epoch)"
        )


def _user_callbacks(callbacks: Any) -> list[Any]:
    """The callbacks given to fit as a list, in every form Keras takes: None, one
    callback, a (nested) list or tuple, a `CallbackList`."""
    if callbacks is None:
        return []
    if isinstance(callbacks, keras.callbacks.CallbackList):
        return list(callbacks.callbacks)
    return list(keras.tree.flatten(callbacks))


def _interrupted(error: BaseException) -> bool:
    """True for a KeyboardInterrupt that arrives wrapped: raised in a generator or a
    `PyDataset` that TensorFlow ran, it comes back as an `UnknownError` naming it."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    message = str(getattr(error, "message", "") or error)
    return isinstance(error, tf.errors.OpError) and bool(
        re.search(r"(^|\s)KeyboardInterrupt(:|\s*$)", message, re.MULTILINE)
    )


def _train(model: Any, callback: ProfileCallback, fit_kwargs: dict[str, Any]) -> Any:
    """`model.fit` measured by `callback`: its History, or None when interrupted.

    A KeyboardInterrupt (raised here, or wrapped by TensorFlow when raised in the data
    pipeline) marks the callback interrupted; any other error stops the GPU sampler and
    propagates (a lost worker's error explained, its type kept).
    """
    # First, so a step is counted before a user callback can stop the fit.
    callbacks = [callback, *_user_callbacks(fit_kwargs.get("callbacks"))]
    multi_worker = strategies.is_multi_worker(model.distribute_strategy)
    try:
        with _multi_worker.multi_worker_fit(model) if multi_worker else nullcontext():
            return model.fit(**{**fit_kwargs, "callbacks": callbacks})
    except KeyboardInterrupt:
        callback.interrupted = True
        _log.warning("accelkit: interrupted; returning a partial report")
        return None
    except tf.errors.OpError as error:
        if _interrupted(error):
            callback.interrupted = True
            _log.warning("accelkit: interrupted in the input pipeline; returning a partial report")
            return None
        callback.stop_sampler()
        if multi_worker and _lost_worker(error):
            raise _explained(error, model.distribute_strategy) from error
        add_policy_note(error)
        raise
    except BaseException as error:
        callback.stop_sampler()
        add_policy_note(error)  # a dtype error under a mixed policy: the fix
        raise


def _is_builder(model: Any) -> bool:
    return callable(model) and not isinstance(model, keras.layers.Layer)


def _check_compiled(model: Any) -> None:
    if getattr(model, "optimizer", None) is None or not getattr(model, "compiled", True):
        raise ValueError(
            "compile the model before accelkit.keras.fit (model.compile(...)), "
            "or pass a function that builds and compiles it"
        )


def _build_in_scope(build: Any, plan: Plan) -> Any:
    """Call the model-building function inside the plan's strategy scope."""
    strategy = strategies.strategy(plan)
    with strategy.scope():
        model = build()
    if not isinstance(model, keras.Model):
        raise TypeError(
            f"the model-building function passed to accelkit.keras.fit returned "
            f"{type(model).__name__}; it must return a compiled keras.Model"
        )
    _check_compiled(model)
    return model


def _check_strategy(model: Any, plan: Plan) -> str:
    """Warn when the plan spreads training over several devices but `model` was built
    outside that strategy's scope (it can only train on one device per process)."""
    if plan.distribution not in (Distribution.MIRRORED, Distribution.MULTI_WORKER_MIRRORED):
        return ""
    # Keras 3 keeps the strategy whose scope the model was built in (None: no scope).
    built_under = getattr(model, "_distribute_strategy", model.distribute_strategy)
    if built_under is not None and not (
        built_under is tf.distribute.get_strategy() and not tf.distribute.has_strategy()
    ):
        if strategies.built_for_a_plan(built_under):
            return ""
        return (
            f"trained under the model's own {type(built_under).__name__} "
            f"({built_under.num_replicas_in_sync} replica(s)), not the plan's"
        )
    if plan.distribution is Distribution.MIRRORED:
        replicas = strategies.strategy(plan).num_replicas_in_sync
        if replicas < 2:
            return ""
        where = f"the {replicas} devices of the plan's MirroredStrategy"
    else:
        workers = plan.hardware.launcher.tf_config_workers or "the"
        where = f"the {workers} workers of TF_CONFIG (MultiWorkerMirroredStrategy)"
    message = (
        f"{model.name} was built outside the plan's strategy scope, so it trains on one "
        f"device per process instead of {where}. To distribute it, pass a function "
        "that builds and compiles the model: accelkit.keras.fit(build_model, x, ...), "
        "or build and compile it inside `with accelkit.keras.strategy(plan).scope():`"
    )
    warnings.warn(f"accelkit: {message}", stacklevel=4)
    return f"built outside the plan's strategy: trained on one device per process ({where} unused)"


def _lost_worker(error: Any) -> bool:
    """True for the errors of collectives whose peer worker is gone or hung (heartbeats
    missed, collective timed out), not for the same error types raised by input I/O."""
    if not isinstance(
        error,
        (
            tf.errors.UnavailableError,
            tf.errors.DeadlineExceededError,
            tf.errors.AbortedError,
            tf.errors.CancelledError,
        ),
    ):
        return False
    text = str(getattr(error, "message", "") or error).lower()
    return any(word in text for word in ("collective", "coordination", "heartbeat"))


def _explained(error: Any, strategy: Any) -> Exception:
    """The same TensorFlow error type, its message prefixed with what happened and what to do."""
    timeout, explicit = dist_timeout()[0::2]
    waited = (
        f"a collective waited longer than {timeout:g} s (ACCELKIT_DIST_TIMEOUT)"
        if isinstance(error, tf.errors.DeadlineExceededError) and explicit
        else "another worker stopped responding"
    )
    message = (
        f"accelkit: multi-worker training stopped on worker "
        f"{strategies.worker_rank(strategy)}: {waited}. A worker that crashed, "
        "hung or was stopped ends the run for all (TensorFlow cannot continue without "
        "it): check the other workers' logs for the first error, then restart every "
        "worker. "
        f"TensorFlow said: {error.message}"
    )
    try:
        return type(error)(error.node_def, error.op, message)
    except Exception:  # noqa: BLE001 - an unusual error class: keep a clear message anyway
        return RuntimeError(message)


def _with_float32_head(model: Any) -> tuple[Any, str]:
    """The model with float32 outputs, compiled as the original was.

    A subclassed model, or one with its own `train_step`/`compute_loss`, trains as it is:
    a wrapper could only cast its outputs after its `call` (Keras computes losses in
    float32 anyway) and would drop its training methods; `ProfileCallback` reads its
    outputs' dtype at the first batch instead."""
    if outputs_float32(model) or overrides_training(model) or not _has_graph(model):
        return model, ""
    config = dict(getattr(getattr(model, "_compile_config", None), "config", None) or {})
    if not config:
        warnings.warn(
            "accelkit: the model's outputs are not float32 under a mixed policy; "
            "wrap it with accelkit.keras.float32_head before compiling",
            stacklevel=4,
        )
        return model, "outputs not float32 under a mixed policy (compile config unknown)"
    wrapped, done = with_float32_head(model)
    config["optimizer"] = model.optimizer  # the same optimizer object, state and all
    wrapped.compile(**config)
    warnings.warn(
        f"accelkit: {model.name}'s outputs were {_dtypes(model)} under a mixed "
        "policy; training a float32-head copy (same layers and optimizer). "
        "Use accelkit.keras.float32_head(model) before compile to avoid this.",
        stacklevel=4,
    )
    return wrapped, (
        f"float32 output head added (outputs were {_dtypes(model)}): "
        + "; ".join(what for what in done if what)
    )


def _has_graph(model: Any) -> bool:
    try:
        return bool(model.outputs)
    except (AttributeError, ValueError):  # subclassed models have no symbolic outputs
        return False


def _dtypes(model: Any) -> str:
    try:
        return ", ".join(sorted({str(getattr(o.dtype, "name", o.dtype)) for o in model.outputs}))
    except (AttributeError, ValueError):
        return "unknown"
