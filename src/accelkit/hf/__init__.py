"""Hugging Face `Trainer` integration: `AccelkitCallback` and `training_arguments(plan)`.

`AccelkitCallback` needs transformers and torch, imported when it is first used, so
``import accelkit.hf`` stays framework-free (docs/integrations.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from accelkit.hf.arguments import training_arguments

if TYPE_CHECKING:
    from accelkit.hf.callback import AccelkitCallback

__all__ = ["AccelkitCallback", "training_arguments"]


def __getattr__(name: str) -> Any:
    if name == "AccelkitCallback":
        from accelkit.utils.imports import require

        require("transformers")
        from accelkit.hf.callback import AccelkitCallback

        return AccelkitCallback
    raise AttributeError(f"module 'accelkit.hf' has no attribute {name!r}")
