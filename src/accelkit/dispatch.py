"""`accelkit.fit`: the profiled fit of whichever framework the model belongs to."""

from __future__ import annotations

import sys
from typing import Any

from accelkit.profiling.run_report import RunReport


def fit(model: Any, *args: Any, **kwargs: Any) -> RunReport:
    """Train `model` through `accelkit.torch.fit` or `accelkit.keras.fit`, with the
    arguments that fit takes, positional or by name.

    The framework is told from the model's type, without importing a framework
    the script has not imported.

    - PyTorch (`torch.nn.Module`): ``fit(model, loader, optimizer, loss_fn, epochs=...)``.
    - Keras (`keras.Model`, or a function that builds one): ``fit(model, x, y, ...)``, the
      arguments of ``model.fit``.

    Raises:
        TypeError: the model is neither a `torch.nn.Module` nor a `keras.Model`, or the
            arguments do not fit that framework's fit (the message names them).

    Example:
        >>> import accelkit
        >>> import torch
        >>> model = torch.nn.Linear(4, 2)
        >>> loader = [(torch.randn(8, 4), torch.randint(0, 2, (8,)))] * 4
        >>> optimizer, loss_fn = torch.optim.SGD(model.parameters()), torch.nn.CrossEntropyLoss()
        >>> report = accelkit.fit(model, loader, optimizer, loss_fn, epochs=3, progress=False)
        >>> report.framework
        'torch'
        >>> import keras
        >>> import numpy as np
        >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        >>> model.compile(optimizer="adam", loss="mse")
        >>> history = accelkit.fit(model, np.zeros((64, 4)), np.zeros((64, 2)), epochs=3, verbose=0)
        >>> history.framework, len(history.history["loss"])
        ('tensorflow', 3)
    """
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(model, torch.nn.Module):
        from accelkit.torch import fit as torch_fit

        return _call(torch_fit, "accelkit.torch.fit", model, args, kwargs)
    keras = sys.modules.get("keras")
    if keras is not None and isinstance(model, keras.Model):
        from accelkit.keras import fit as keras_fit

        return _call(keras_fit, "accelkit.keras.fit", model, args, kwargs)
    raise TypeError(
        f"accelkit.fit takes a torch.nn.Module or a keras.Model, "
        f"not {type(model).__module__}.{type(model).__name__}"
    )


def _call(
    target: Any, name: str, model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> RunReport:
    """`target(model, *args, **kwargs)`, with a bad call named before any work starts."""
    import inspect

    try:
        inspect.signature(target).bind(model, *args, **kwargs)
    except TypeError as error:
        raise TypeError(
            f"accelkit.fit dispatches this model to {name}{inspect.signature(target)}: {error}"
        ) from None
    return target(model, *args, **kwargs)
