"""Keras helpers: `float32_head` now; the profiled `fit` and `ProfileCallback` build on it.

Importing this module does not import TensorFlow; each helper does when called.
"""

from __future__ import annotations

from typing import Any


def float32_head(model: Any) -> Any:
    """Return `model` with float32 outputs, for training under a mixed policy.

    See `accelkit.frameworks.tensorflow_adapter.float32_head`.

    Example:
        >>> accelkit.auto_configure(framework="tensorflow")
        >>> model = accelkit.keras.float32_head(build_model())
    """
    from accelkit.frameworks import tensorflow_adapter

    return tensorflow_adapter.float32_head(model)


__all__ = ["float32_head"]
