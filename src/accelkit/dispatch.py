"""`accelkit.fit`: the profiled fit of whichever framework the model belongs to."""

from __future__ import annotations

import sys
from typing import Any

from accelkit.profiling.run_report import RunReport


def fit(model: Any, data: Any = None, **kwargs: Any) -> RunReport:
    """Train `model` on `data` through `accelkit.torch.fit` or `accelkit.keras.fit`.

    The framework is told from the model's type, without importing a framework
    the script has not imported.

    - PyTorch (`torch.nn.Module`): ``fit(model, loader, optimizer=..., loss_fn=..., epochs=...)``.
    - Keras (`keras.Model`): ``fit(model, x, y=None, **model_fit_kwargs)``.

    Raises:
        TypeError: the model is neither a `torch.nn.Module` nor a `keras.Model`.

    Example:
        >>> report = accelkit.fit(model, loader, optimizer=opt, loss_fn=loss, epochs=3)
    """
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(model, torch.nn.Module):
        from accelkit.torch import fit as torch_fit

        try:
            optimizer = kwargs.pop("optimizer")
            loss_fn = kwargs.pop("loss_fn")
        except KeyError as missing:
            raise TypeError(f"accelkit.fit on a PyTorch model needs {missing.args[0]}=") from None
        return torch_fit(model, data, optimizer, loss_fn, **kwargs)
    keras = sys.modules.get("keras")
    if keras is not None and isinstance(model, keras.Model):
        from accelkit.keras import fit as keras_fit

        return keras_fit(model, data, **kwargs)
    raise TypeError(f"accelkit.fit takes a torch.nn.Module or a keras.Model, "
                    f"not {type(model).__module__}.{type(model).__name__}")
