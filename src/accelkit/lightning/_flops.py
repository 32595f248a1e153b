"""FLOPs of one step of a LightningModule, counted through its own `training_step`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from accelkit.profiling.flop_count import FlopCount
from accelkit.profiling.flops_torch import count_train_step_flops


def count_training_step(trainer: Any, pl_module: Any, batch: Any) -> FlopCount:
    """Forward + loss + backward of ``pl_module.training_step(batch, 0)`` (no optimizer
    step), under the Trainer's precision (its `train_step_context`: autocast for
    "bf16-mixed" and "16-mixed"). The loss is read from what `training_step` returns: a
    tensor, or a dict's ``"loss"`` (`accelkit.profiling.torch_batches`). Never raises:
    an error leaves `total` None and says why in `notes`.

    Example:
        >>> import torch
        >>> class Module(torch.nn.Module):   # a LightningModule's training_step
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.net = torch.nn.Linear(16, 4)
        ...     def training_step(self, batch, batch_idx):
        ...         x, y = batch
        ...         return torch.nn.functional.cross_entropy(self.net(x), y)
        >>> batch = (torch.randn(8, 16), torch.zeros(8).long())
        >>> count_training_step(None, Module(), batch).total   # no Trainer: no autocast
        2048
        >>> # 2·8·16·4 forward + the same for the weight gradient
    """
    plugin = getattr(trainer, "precision_plugin", None)
    autocast = getattr(plugin, "train_step_context", None)
    with logging_off(pl_module):
        return count_train_step_flops(_TrainingStep(pl_module), (batch,), autocast=autocast)


class _TrainingStep(torch.nn.Module):
    """The module's `training_step` as a model whose output is the loss, for the counter
    (which restores the module's parameters' grads, buffers and modes afterwards)."""

    def __init__(self, module: Any) -> None:
        super().__init__()
        self.module = module

    def forward(self, batch: Any) -> Any:
        return self.module.training_step(batch, 0)


@contextlib.contextmanager
def logging_off(module: Any) -> Iterator[None]:
    """`self.log` does nothing in the counted pass: it is not a step of the fit."""
    module.log = module.log_dict = _ignore
    try:
        yield
    finally:
        del module.log, module.log_dict


def _ignore(*args: Any, **kwargs: Any) -> None:
    return None
