"""The fit's evaluation: the mean loss over an evaluation loader after each epoch.

It runs in the meter's ``"evaluation"`` phase (`accelkit.torch.fit` puts it there), so
its time is reported beside the training figures and counts in none of them. The
model computes as in training (the plan's autocast, the step's loss) but in eval mode
and without gradients; every submodule gets back the mode it had, so a submodule the
user froze in eval mode stays frozen.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from accelkit.torch.training.prepare import Prepared, to_device
from accelkit.torch.training.step import Step
from accelkit.utils.imports import require


def evaluator(run: Prepared, eval_loader: Iterable[Any]) -> Callable[[Step], float | None]:
    """A function that evaluates the model through a step's loss and returns the mean
    loss over `eval_loader` (None when it yielded nothing).

    Example:
        >>> import accelkit
        >>> import torch
        >>> from accelkit.torch.training.prepare import prepare
        >>> from accelkit.torch.training.step import make_step
        >>> model, plan = torch.nn.Linear(4, 2), accelkit.plan_for(None)
        >>> loader = [(torch.randn(8, 4), torch.zeros(8).long())] * 3
        >>> run = prepare(model, loader, plan, device="cpu", channels_last=None, group=None)
        >>> step = make_step(run, plan, torch.nn.CrossEntropyLoss(),
        ...                  torch.optim.SGD(model.parameters(), lr=0.1), compile=None,
        ...                  max_grad_norm=None)
        >>> loss = evaluator(run, loader)(step)
        >>> loss > 0 and model.training
        True
    """
    torch = require("torch")
    model = run.model

    def evaluate(step: Step) -> float | None:
        modes = [(module, module.training) for module in model.modules()]
        model.eval()
        total, count = torch.zeros((), device=run.device), 0
        try:
            with torch.no_grad():
                for batch in eval_loader:
                    total += step.forward_loss(to_device(batch, run.device, run.layout)).float()
                    count += 1
        finally:
            for module, training in modes:
                module.training = training
        return float(total / count) if count else None

    return evaluate
