"""A custom `train_step` under Keras' `LossScaleOptimizer` that does not scale its loss.

Here, below `accelkit.keras`, because the TensorFlow adapter needs it too: when it sets
``mixed_float16`` itself it guards every model compiled afterwards (`guard_at_compile`),
so a plain ``model.fit`` trains such a step right; `accelkit.keras.ProfileCallback`
guards the models it fits.

Under ``mixed_float16`` `model.compile` wraps the optimizer in a `LossScaleOptimizer`,
whose `apply` divides every gradient by the loss scale (32768 at first). Keras' own
`train_step` multiplies the loss by it first (``self.optimizer.scale_loss(loss)``);
a `train_step` written as the Keras tutorials write it (``tape.gradient(loss, ...)``,
``self.optimizer.apply_gradients(...)``) does not, and its model trains on gradients
divided by 32768, with no error: after one SGD(0.1) step a weight is 6.1e-06, not 0.2.

`UnscaledStepGuard` finds out while Keras traces the step, which is when Python runs:
the model's `train_step` marks the start of a step, the optimizer's `scale_loss` marks
the loss scaled, and its `apply` reads the mark. A step that applies gradients it did not
scale gets them multiplied by the loss scale first, so the optimizer's division gives
back the gradients as computed; the scale is kept from growing for those steps (it would
otherwise double every 2000 steps until gradients times it overflow). The step then
trains as it would without loss scaling (float16 gradients can underflow, which
``scale_loss`` exists to prevent), and the guard says so once, with the fix.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import threading
from collections.abc import Callable
from typing import Any

_log = logging.getLogger("accelkit")
_NO_GROWTH = 2**31 - 1  # growth steps never reached: the scale only halves on overflow
_GUARD = "_accelkit_loss_scale_guard"  # the model attribute holding its guard

FIX = (
    "call loss = self.optimizer.scale_loss(loss) inside the GradientTape, before "
    "tape.gradient (Keras' own train_step does), or train under mixed_bfloat16 "
    "(no loss scaling; compute capability >= 8.0)"
)


def overrides_training(model: Any) -> str:
    """The training methods `model`'s class overrides (``"train_step"``...), or ''.

    Example:
        >>> import keras
        >>> class GAN(keras.Model):
        ...     def train_step(self, data):
        ...         return {}
        >>> overrides_training(GAN()), overrides_training(keras.Sequential())
        ('train_step', '')
    """
    names = ("train_step", "test_step", "compute_loss")
    return ", ".join(name for name in names if _user_defined(type(model), name))


def _user_defined(cls: type, name: str) -> bool:
    for klass in cls.__mro__:
        if name in vars(klass):
            return not klass.__module__.startswith(("keras.", "tf_keras."))
    return False


def warn_unscaled(model: Any) -> None:
    """Say once per fit that `model`'s step applies unscaled gradients, and the fix."""
    _log.warning(
        "accelkit: %s.train_step applies gradients without "
        "self.optimizer.scale_loss(loss) under %s: Keras' LossScaleOptimizer would "
        "divide them by the loss scale (%g). accelkit multiplies them back, so they are "
        "applied as computed, but without loss scaling float16 gradients can underflow. "
        "Fix: %s",
        type(model).__name__,
        # the model's: Keras' global policy is per thread (a replica's reads float32)
        getattr(model.dtype_policy, "name", "a mixed policy"),
        float(model.optimizer.initial_scale),
        FIX,
    )


def guard_of(model: Any) -> UnscaledStepGuard | None:
    """The guard installed on `model` (at compile or by a fit), if any."""
    return getattr(model, _GUARD, None)


def guard_at_compile() -> None:
    """From now on, every `keras.Model.compile` guards a custom `train_step` under a
    `LossScaleOptimizer` (once per process; the TensorFlow backend only). For the
    TensorFlow adapter, when it sets ``mixed_float16`` itself: the guard multiplies back
    only gradients whose loss was not scaled while the step was traced, so a step that
    calls ``scale_loss`` is left as it is. A guard that cannot be installed leaves the
    compile as Keras made it."""
    import keras

    compile_ = keras.Model.compile
    if getattr(compile_, _GUARD, False) or keras.config.backend() != "tensorflow":
        return

    @functools.wraps(compile_)
    def compile(model: Any, *args: Any, **kwargs: Any) -> Any:
        result = compile_(model, *args, **kwargs)
        try:
            UnscaledStepGuard(model, found=lambda: warn_unscaled(model)).install()
        except Exception as exc:  # noqa: BLE001 - never the reason a compile fails
            _log.debug("accelkit: no loss-scale guard for %s: %s", type(model).__name__, exc)
        return result

    setattr(compile, _GUARD, True)
    keras.Model.compile = compile


def is_loss_scaled(optimizer: Any) -> bool:
    """True for Keras 3's `LossScaleOptimizer` (what compile makes under mixed_float16)."""
    return all(hasattr(optimizer, name) for name in ("scale_loss", "inner_optimizer"))


def train_step_facts(model: Any) -> dict[str, Any] | None:
    """For the advisor: a model's own `train_step`, and whether its source calls
    ``scale_loss`` (None: unreadable); None when the model keeps Keras' step.

    Example:
        >>> import keras
        >>> class VAE(keras.Model):
        ...     def train_step(self, data):
        ...         return {}
        >>> train_step_facts(VAE())["scales_loss"]
        False
    """
    if "train_step" not in overrides_training(model):
        return None
    try:
        scales: bool | None = "scale_loss" in inspect.getsource(type(model).train_step)
    except (OSError, TypeError):  # defined in a notebook cell or exec'd: unreadable
        scales = None
    return {"model_class": type(model).__name__, "scales_loss": scales}


class UnscaledStepGuard:
    """For one fit: applies a custom `train_step`'s unscaled gradients as computed.

    Args:
        model: the model about to be fitted (TensorFlow backend).
        found: called once, at the first step found applying unscaled gradients.

    `install()` does nothing (and returns False) unless the model overrides `train_step`
    and its optimizer is a `LossScaleOptimizer`; `restore()` takes the hooks off.

    Example:
        >>> import keras
        >>> guard = UnscaledStepGuard(keras.Sequential(), found=print)
        >>> guard.install()   # Keras' own train_step: nothing to guard
        False
    """

    def __init__(self, model: Any, found: Callable[[], None]) -> None:
        self.model = model
        self.optimizer: Any = getattr(model, "optimizer", None)
        self.unscaled = False  # a step applied gradients it did not scale
        self.scaled = False  # a step scaled its loss before applying
        self.found = found
        self._local = threading.local()  # per replica thread: MirroredStrategy traces in several
        self._installed = False

    def install(self) -> bool:
        if "train_step" not in overrides_training(self.model) or not is_loss_scaled(self.optimizer):
            return False
        if guard_of(self.model) is not None:  # guarded at compile: a second would double
            return False
        model, optimizer = self.model, self.optimizer
        step, scale_loss, apply = model.train_step, optimizer.scale_loss, optimizer.apply
        self._growth = optimizer.dynamic_growth_steps
        local = self._local

        def train_step(data: Any) -> Any:
            local.in_step, local.scaled = True, False
            try:
                return step(data)
            finally:
                local.in_step = False

        def scaled(loss: Any) -> Any:
            local.scaled = True
            return scale_loss(loss)

        def guarded_apply(grads: Any, trainable_variables: Any = None) -> Any:
            if getattr(local, "in_step", False) and not getattr(local, "scaled", False):
                return self._apply_unscaled(apply, grads, trainable_variables)
            self.scaled = self.scaled or getattr(local, "in_step", False)
            return apply(grads, trainable_variables)

        model.train_step, optimizer.scale_loss, optimizer.apply = train_step, scaled, guarded_apply
        # A step traced before (an earlier fit) would keep dividing: trace it again.
        model.make_train_function(force=True)
        setattr(model, _GUARD, self)
        self._installed = True
        return True

    def restore(self) -> None:
        """Take the hooks off (the step traced with them keeps its gradients right)."""
        if not self._installed:
            return
        self._installed = False
        for owner, names in (
            (self.model, ("train_step", _GUARD)),
            (self.optimizer, ("scale_loss", "apply")),
        ):
            for name in names:
                with contextlib.suppress(AttributeError):  # the class's method again
                    delattr(owner, name)

    def _apply_unscaled(self, apply: Callable[..., Any], grads: Any, variables: Any) -> Any:
        """Multiply by the scale the optimizer divides by (a power of two: exact), with
        the scale's growth off for this step."""
        import tensorflow as tf

        optimizer = self.optimizer
        if not self.unscaled:
            self.unscaled = True
            self.found()
        if not optimizer.built:
            optimizer.build(variables if variables is not None else self.model.trainable_variables)
        scale = optimizer.dynamic_scale
        grads = [_times(tf, g, scale) for g in grads]
        optimizer.dynamic_growth_steps = _NO_GROWTH
        try:
            return apply(grads, variables)
        finally:
            optimizer.dynamic_growth_steps = self._growth


def _times(tf: Any, gradient: Any, scale: Any) -> Any:
    if gradient is None:
        return None
    if isinstance(gradient, tf.IndexedSlices):  # an embedding's: keep it sparse
        values = gradient.values * tf.cast(scale, gradient.values.dtype)
        return tf.IndexedSlices(values, gradient.indices, gradient.dense_shape)
    return gradient * tf.cast(scale, gradient.dtype)
