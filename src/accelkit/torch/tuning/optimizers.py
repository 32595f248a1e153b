"""The optimizer's implementation (for-loop, foreach, fused), switched in place for `tune`.

PyTorch's Adam, AdamW, SGD and Adagrad (and, for foreach, most others) read
``group["fused"]`` / ``group["foreach"]`` at every ``step()``, so the
implementation can change between two steps without building a new optimizer.
Switching in place keeps the user's optimizer object, and with it every reference
to it: an LR scheduler, a checkpoint hook, the script's own variable. A rebuilt
optimizer would leave a scheduler stepping an object nobody trains with.

The one piece of state that depends on the implementation is ``state["step"]``:
the fused kernels keep it as a float32 tensor on the parameter's device, the
others on the CPU (``torch.optim.Optimizer._process_value_according_to_param_policy``
moves it the same way when a state dict is loaded). `use` moves it along.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from accelkit.torch.measuring.facts import optimizer_facts
from accelkit.torch.tuning.candidate import Candidate, Skipped

if TYPE_CHECKING:
    from accelkit.torch.tuning.engine import Engine


@dataclasses.dataclass(frozen=True)
class Variant:
    """A faster implementation the optimizer can switch to.

    Attributes:
        flag: ``"fused"`` or ``"foreach"``: the param-group key that selects it.
        name: what the tuning report calls it.
    """

    flag: str
    name: str


def faster_variant(optimizer: Any) -> tuple[Variant | None, str]:
    """The implementation to try instead of the one the optimizer runs, or (None, why not).

    Only when the user left the choice to PyTorch (``fused`` and ``foreach`` unset,
    i.e. None, in every param group): a value the user set is theirs. What is available
    is read as `accelkit.torch.measuring.facts.optimizer_facts` reads it, from PyTorch itself.

    Example:
        >>> import torch
        >>> model = torch.nn.Linear(4, 2)
        >>> faster_variant(torch.optim.AdamW(model.parameters()))[0].name
        'fused'
        >>> faster_variant(torch.optim.AdamW(model.parameters(), foreach=False))[1]
        'AdamW: foreach=False was set by the script'
    """
    facts = optimizer_facts(optimizer)
    name = facts["type"]
    if "implementation" not in facts:
        return None, f"{name} is not a torch.optim optimizer ({facts.get('facts_error', '')})"
    for group in optimizer.param_groups:
        for key in ("fused", "foreach"):
            if group.get(key) is not None:
                return None, f"{name}: {key}={group[key]} was set by the script"
        if group.get("capturable"):
            return None, f"{name}: capturable=True (CUDA graphs) is left as it is"
    if facts["fused_available"]:
        return Variant("fused", "fused"), ""
    if facts["foreach_available"] and facts["implementation"] == "for-loop":
        return Variant("foreach", "foreach"), ""
    return None, (
        f"{name} runs its {facts['implementation']} implementation and has no "
        "faster one for these parameters"
    )


def use(optimizer: Any, variant: Variant, on: bool) -> None:
    """Turn `variant` on (or back to PyTorch's default, None) in every param group.

    Example:
        >>> import torch
        >>> optimizer = torch.optim.AdamW(torch.nn.Linear(4, 2).parameters())
        >>> use(optimizer, Variant("fused", "fused"), True)
        >>> optimizer.param_groups[0]["fused"]
        True
    """
    import torch

    for group in optimizer.param_groups:
        group[variant.flag] = True if on else None
    if variant.flag != "fused":
        return
    for param, state in optimizer.state.items():
        step = state.get("step") if isinstance(state, dict) else None
        if isinstance(step, torch.Tensor):
            device = param.device if on else torch.device("cpu")
            state["step"] = step.to(device=device, dtype=torch.float32)


def lever(engine: Engine) -> Iterator[Candidate | Skipped]:
    """tune's fused-optimizer lever: the optimizer's faster implementation, switched in
    place on top of the best so far, where the script left that choice to PyTorch."""
    optimizer = engine.door.optimizer
    if optimizer is None:
        yield Skipped("optimizer", "not one torch optimizer to switch")
        return
    variant, why = faster_variant(optimizer)
    if variant is None:
        yield Skipped("optimizer", why)
        return
    yield Candidate(
        engine.best.settings.with_(optimizer=variant.name),
        on=lambda: use(optimizer, variant, True),
        off=lambda: use(optimizer, variant, False),
    )
