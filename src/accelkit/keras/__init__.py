"""Keras side of accelkit: the profiled `fit`, `ProfileCallback` and `float32_head`.

Importing this module does not import TensorFlow; `fit` and `ProfileCallback`
do on first use.
"""

from __future__ import annotations

from typing import Any


def float32_head(model: Any) -> Any:
    """Return `model` with float32 outputs, for training under a mixed policy.

    A functional or built Sequential model's last activation is computed again in
    float32 from its logits (TensorFlow's mixed-precision guide), with the same weights;
    a linear output is cast. A subclassed model is wrapped in a model that casts its
    outputs (its `call` is opaque: the warning says how to compute the activation in
    float32 there); one with its own `train_step` is returned as it is, with a warning.
    A model whose outputs are float32 already is returned as it is
    (`accelkit.keras.head.float32_head`).

    Example:
        >>> import accelkit
        >>> import keras
        >>> plan = accelkit.auto_configure(framework="tensorflow", verbose=False)
        >>> inputs = keras.Input((4,))
        >>> model = accelkit.keras.float32_head(keras.Model(inputs, keras.layers.Dense(2)(inputs)))
        >>> model.output.dtype
        'float32'
    """
    from accelkit.keras import head

    return head.float32_head(model)


def strategy(plan: Any = None) -> Any:
    """The `tf.distribute.Strategy` the plan chose, built once per process.

    `MirroredStrategy` over the local GPUs, `MultiWorkerMirroredStrategy` under
    TF_CONFIG, else TensorFlow's default strategy (see `accelkit.keras.strategies`).

    Args:
        plan: a TensorFlow plan; default: the last `auto_configure()` plan.

    Example:
        >>> import accelkit
        >>> import keras
        >>> plan = accelkit.auto_configure(framework="tensorflow", verbose=False)
        >>> with accelkit.keras.strategy(plan).scope():
        ...     model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        ...     model.compile(optimizer="adam", loss="mse")
    """
    from accelkit.keras import strategies

    return strategies.strategy(plan)


def __getattr__(name: str) -> Any:  # PEP 562: import TensorFlow only when these are used
    if name in ("fit", "ProfileCallback"):
        from accelkit.utils.imports import require

        require("keras")  # Keras 2, or a Keras 3 too old: the upgrade hint, not an AttributeError
    if name == "fit":
        from accelkit.keras.training import fit

        return fit
    if name == "ProfileCallback":
        from accelkit.keras.callback import ProfileCallback

        return ProfileCallback
    raise AttributeError(f"module 'accelkit.keras' has no attribute {name!r}")


__all__ = ["ProfileCallback", "fit", "float32_head", "strategy"]
