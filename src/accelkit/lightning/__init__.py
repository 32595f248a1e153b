"""accelkit for Lightning: a callback that measures `Trainer.fit`, and Trainer settings
from a plan.

    plan = accelkit.auto_configure()
    callback = accelkit.lightning.AccelkitCallback()
    trainer = lightning.Trainer(callbacks=[callback], **accelkit.lightning.trainer_kwargs(plan))
    trainer.fit(model, loader)
    print(callback.report)

Works with the `lightning` package, or `pytorch_lightning` where only that is
installed. `import accelkit.lightning` imports neither (nor torch): the callback's
module is imported when `AccelkitCallback` is first used. The figures logged every
window are named as in every accelkit logger integration (`accelkit.profiling.metrics`:
``accelkit/step_time_s``, ``accelkit/samples_per_second``...).
"""

from __future__ import annotations

from typing import Any

from accelkit.lightning.kwargs import trainer_kwargs

__all__ = ["AccelkitCallback", "trainer_kwargs"]


def __getattr__(name: str) -> Any:
    if name == "AccelkitCallback":  # imports lightning and torch: only when asked for
        from accelkit.lightning.callback import AccelkitCallback

        return AccelkitCallback
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
