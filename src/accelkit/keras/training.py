"""`accelkit.keras.fit`: `model.fit` with the plan's helpers and a `RunReport`."""

from __future__ import annotations

import sys
import warnings
from typing import Any

import keras

from accelkit.advisor.facts_keras import input_facts
from accelkit.configure import auto_configure, current_plan
from accelkit.frameworks.tensorflow_adapter import float32_head, outputs_float32
from accelkit.keras.callback import ProfileCallback
from accelkit.planning import Plan
from accelkit.report.run_report import RunReport


def fit(model: Any, x: Any = None, y: Any = None, *, plan: Plan | None = None,
        flops_per_step: float | None = None, tokens_per_sample: int | None = None,
        warmup: int = 3, window: int = 50, calibrate: bool = False, sample_gpu: bool = True,
        **fit_kwargs: Any) -> RunReport:
    """Run `model.fit(x, y, **fit_kwargs)` measured, and return its `RunReport`.

    Every `model.fit` argument passes through (`epochs`, `batch_size`,
    `validation_data`, `callbacks`, ...); `report.history` holds Keras' History.
    Under a mixed policy, a model whose outputs are not float32 gets a float32
    head (`float32_head`) and is compiled again with the same optimizer, loss and
    metrics: the report says so. A KeyboardInterrupt ends the fit early with a
    partial report (`report.interrupted`); any other error propagates unchanged
    after the GPU sampler has stopped.

    Args:
        model: a compiled Keras model.
        x, y: as for `model.fit`.
        plan: the plan in force; defaults to the last `auto_configure()` plan, or calls
            `auto_configure(framework="tensorflow")` when there is none.
        flops_per_step, tokens_per_sample, warmup, window, calibrate, sample_gpu:
            see `ProfileCallback`.

    Example:
        >>> accelkit.auto_configure(framework="tensorflow")
        >>> report = accelkit.keras.fit(model, dataset, epochs=3)
        >>> report.history.history["loss"]
    """
    if getattr(model, "optimizer", None) is None or not getattr(model, "compiled", True):
        raise ValueError("compile the model before accelkit.keras.fit (model.compile(...))")
    plan = plan or current_plan() or auto_configure(framework="tensorflow", verbose=False)
    notes = {}
    if keras.mixed_precision.global_policy().compute_dtype != "float32":
        model, note = _with_float32_head(model)
        if note:
            notes["model"] = note
    callback = ProfileCallback(plan, flops_per_step=flops_per_step,
                               tokens_per_sample=tokens_per_sample, warmup=warmup,
                               window=window, sample_gpu=sample_gpu, calibrate=calibrate)
    callback.facts["loader"] = input_facts(x)
    # First, so a step is counted before a user callback can stop the fit.
    callbacks = [callback, *(fit_kwargs.pop("callbacks", None) or [])]
    history = None
    try:
        history = model.fit(x, y, callbacks=callbacks, **fit_kwargs)
    except KeyboardInterrupt:
        callback.interrupted = True
        print("accelkit: interrupted; returning a partial report", file=sys.stderr)
    except BaseException:
        callback.stop_sampler()
        raise
    report = callback.finish()
    report.history = history if history is not None else model.history
    report.notes.update(notes)
    return report


def _with_float32_head(model: Any) -> tuple[Any, str]:
    """The model with float32 outputs, compiled as the original was."""
    if outputs_float32(model):
        return model, ""
    config = dict(getattr(getattr(model, "_compile_config", None), "config", None) or {})
    if not config:
        warnings.warn("accelkit: the model's outputs are not float32 under a mixed policy; "
                      "wrap it with accelkit.keras.float32_head before compiling", stacklevel=3)
        return model, "outputs not float32 under a mixed policy (compile config unknown)"
    wrapped = float32_head(model)
    config["optimizer"] = model.optimizer  # the same optimizer object, state and all
    wrapped.compile(**config)
    warnings.warn(f"accelkit: {model.name}'s outputs were {_dtypes(model)} under a mixed "
                  "policy; training a float32-head copy (same layers and optimizer). "
                  "Use accelkit.keras.float32_head(model) before compile to avoid this.",
                  stacklevel=3)
    return wrapped, f"float32 output head added (outputs were {_dtypes(model)})"


def _dtypes(model: Any) -> str:
    try:
        return ", ".join(sorted({str(getattr(o.dtype, "name", o.dtype)) for o in model.outputs}))
    except (AttributeError, ValueError):
        return "unknown"
