"""Tiny PyTorch models and synthetic data, shared by the torch tests and the
torchrun worker (which puts this folder on its path: it runs outside pytest).

Import it after ``pytest.importorskip("torch")``: it imports torch.

    from ..helpers.torch_data import CPU_PLAN, mlp, separable, train
"""

from __future__ import annotations

import itertools
from typing import Any

import torch

import accelkit.torch
from accelkit.hardware.info import HardwareInfo
from accelkit.planning import Request, plan
from accelkit.profiling.run_report import RunReport

# A plan for a machine without GPUs: fp32, nothing compiled.
CPU_PLAN = plan(HardwareInfo(source="snapshot"), Request(framework="torch"))


def separable(
    n: int = 1024, dim: int = 16, classes: int = 4, batch: int = 32, shuffle: bool = False
) -> torch.utils.data.DataLoader:
    """A DataLoader over `n` points whose class is the argmax of a fixed linear map:
    a problem an MLP learns in a few epochs. The same data on every call."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(n, dim, generator=generator)
    y = (x @ torch.randn(dim, classes, generator=generator)).argmax(1)
    return torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(x, y), batch_size=batch, shuffle=shuffle
    )


def batches(
    n: int = 48, batch: int = 64, dim: int = 256, classes: int = 8, nan_from: int | None = None
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Pre-built batches in a list: no per-sample collation, so no input wait to speak of.
    From batch index `nan_from` on, each batch holds one NaN."""
    generator = torch.Generator().manual_seed(0)
    out = []
    for i in range(n):
        x = torch.randn(batch, dim, generator=generator)
        if nan_from is not None and i >= nan_from:
            x[0, 0] = float("nan")
        out.append((x, torch.randint(0, classes, (batch,), generator=generator)))
    return out


def mlp(*widths: int, seed: int = 0) -> torch.nn.Sequential:
    """Linear layers of these widths with ReLU between them (default 16 -> 64 -> 4),
    initialised from `seed`."""
    torch.manual_seed(seed)
    widths = widths or (16, 64, 4)
    layers: list[torch.nn.Module] = []
    for a, b in itertools.pairwise(widths):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def train(
    model: Any = None,
    loader: Any = None,
    *,
    optimizer: Any = torch.optim.AdamW,
    lr: float = 1e-2,
    **kwargs: Any,
) -> RunReport:
    """`accelkit.torch.fit` with cross-entropy, on `CPU_PLAN` without progress unless
    given; `model` and `loader` default to `mlp()` and `separable()`."""
    model = mlp() if model is None else model
    loader = separable() if loader is None else loader
    kwargs.setdefault("plan", CPU_PLAN)
    kwargs.setdefault("progress", False)
    return accelkit.torch.fit(
        model, loader, optimizer(model.parameters(), lr=lr), torch.nn.CrossEntropyLoss(), **kwargs
    )
