"""The forward that activation checkpointing recomputes in backward, told apart from the
model's own FLOPs while a step is counted.

MFU counts model FLOPs: the forward and backward the model needs, once. Recomputing
activations in backward (rematerialisation) is work the hardware does on top; PaLM
(Chowdhery et al. 2022, appendix B) counts it in hardware FLOPs utilisation (HFU), not
in MFU, so that a run that checkpoints is judged by what it costs: it does the same
model work in more time.

`torch.utils.checkpoint` re-runs the checkpointed function during backward, in both of
its implementations: the reentrant one in `CheckpointFunction.backward`, the
non-reentrant one (transformers 5's default) in the unpack hook of the first saved tensor
a backward formula reads, stopping once the tensors it needs are back. An op is counted
as recomputation when all three hold:

- it runs inside a backward pass (the autograd engine's graph task is set);
- grad mode is on: the engine runs backward formulas with it off (unless
  ``create_graph``), and both implementations turn it on to rebuild the graph;
- a module's forward began inside that backward pass. This keeps a double backward
  (``torch.autograd.grad(..., create_graph=True)`` in a gradient penalty or a
  physics-informed loss, whose formulas run with grad on but call no module) model work.

What the check cannot see: a checkpointed function that calls no `nn.Module` (bare
tensor ops on parameters) has its recomputation counted as model FLOPs, as it was
before this split; Hugging Face layers, torchtitan's and Lightning's checkpoint
wrappers and ``checkpoint(block, x)`` all call modules. Selective checkpointing's saved
ops are served from its cache, never run again, and so are not counted at all.

The counter also tells float8 matmuls apart (`counted_as`): torchao's ``Float8Linear``
hands ``aten.mm`` tensors of its float8 subclass, whose own dispatch then calls
``torch._scaled_mm`` below the counter, where no dispatch mode sees it. A matmul of such
a tensor is counted as ``aten._scaled_mm`` (the op that runs; `FlopCount.float8`).
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

if TYPE_CHECKING:
    from typing_extensions import Self

_MATMULS = frozenset(
    {torch.ops.aten.mm, torch.ops.aten.addmm, torch.ops.aten.bmm, torch.ops.aten.baddbmm}
)
_FLOAT8_DTYPES = frozenset(
    getattr(torch, name)
    for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
    if hasattr(torch, name)
)


def counted_as(func_packet: Any, args: tuple[Any, ...]) -> Any:
    """The op a matmul is counted as: ``aten._scaled_mm`` where an operand is a float8
    tensor subclass (torchao's ``Float8TrainingTensor``: float8 data in ``_data``, seen
    as its original dtype from outside), else `func_packet` itself.

    Example:
        >>> counted_as(torch.ops.aten.mm, (torch.randn(2, 2), torch.randn(2, 2)))
        <OpOverloadPacket(op='aten.mm')>
    """
    if func_packet in _MATMULS and any(_float8(arg) for arg in args):
        return torch.ops.aten._scaled_mm
    return func_packet


def _float8(value: Any) -> bool:
    data = getattr(value, "_data", None)
    return isinstance(value, torch.Tensor) and getattr(data, "dtype", None) in _FLOAT8_DTYPES


def _in_backward() -> bool:
    task = getattr(torch._C, "_current_graph_task_id", None)
    return task is not None and task() != -1


class _Recomputation(TorchDispatchMode):
    """Entered above a `FlopCounterMode`: what the counter adds while checkpointing
    recomputes, per op. Module forwards that begin in a backward pass are tracked with
    global hooks (the post-hook runs even when the forward raises: the non-reentrant
    checkpoint stops its recomputation with an exception)."""

    def __init__(self, counter: FlopCounterMode) -> None:
        super().__init__()
        self.counter = counter
        self.by_op: dict[str, int] = defaultdict(int)
        self._depth = 0
        self._hooks: list[Any] = []

    def _began(self, *_: Any) -> None:
        if _in_backward():
            self._depth += 1

    def _ended(self, *_: Any) -> None:
        if _in_backward() and self._depth:
            self._depth -= 1

    def __enter__(self) -> Self:
        modules = torch.nn.modules.module
        self._hooks = [
            modules.register_module_forward_pre_hook(self._began),
            modules.register_module_forward_hook(self._ended, always_call=True),
        ]
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        try:
            super().__exit__(*exc)
        finally:
            for hook in self._hooks:
                hook.remove()
            self._hooks = []

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if not (self._depth and torch.is_grad_enabled() and _in_backward()):
            return func(*args, **kwargs)
        before = self.counter.get_total_flops()
        out = func(*args, **kwargs)  # the counter below counts it
        added = self.counter.get_total_flops() - before
        if added:
            self.by_op[str(counted_as(func._overloadpacket, args))] += added
        return out


class StepFlopCounter(FlopCounterMode):
    """A `FlopCounterMode` that also counts, apart, the forward ops activation
    checkpointing recomputes in backward (`recomputed_flops`): its total is what the
    hardware ran, the total less the recomputation is the model's FLOPs.

    Example:
        >>> from torch.utils.checkpoint import checkpoint
        >>> block = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(),
        ...                             torch.nn.Linear(4, 4))
        >>> x = torch.randn(8, 4, requires_grad=True)
        >>> with StepFlopCounter() as counter:
        ...     checkpoint(block, x, use_reentrant=False).sum().backward()
        >>> counter.get_total_flops(), counter.recomputed_flops()
        (1792, 256)
        >>> # 3 x 512 forward, and the first Linear again for the ReLU output the second
        >>> # saved (the recomputation stops there: the rest is not needed)
    """

    def __init__(self, custom_mapping: Mapping[Any, Callable[..., int]] | None = None) -> None:
        super().__init__(display=False, custom_mapping=dict(custom_mapping or {}))
        self._recomputation: _Recomputation | None = None
        self._recomputed: dict[str, int] = {}
        self._eager: Any = None

    def __enter__(self) -> Self:
        # Compiled code counted as it runs (a door counts the run's own first step, which
        # a script may have compiled) runs eager while counted: dynamo (torch 2.13) skips
        # a compiled function called under a dispatch mode, and never runs its compiled
        # code again. Same ops, same FLOPs; it compiles at its next call instead.
        self._eager = _force_eager()
        super().__enter__()
        self._recomputation = _Recomputation(self)
        self._recomputation.__enter__()
        return self

    def __exit__(self, *exc: object) -> Any:
        recomputation, self._recomputation = self._recomputation, None
        try:
            if recomputation is not None:
                recomputation.__exit__(*exc)
                self._recomputed = dict(recomputation.by_op)
        finally:
            result = super().__exit__(*exc)
            eager, self._eager = self._eager, None
            if eager is not None:
                eager.__exit__(*exc)
        return result

    def _count_flops(self, func_packet: Any, out: Any, args: Any, kwargs: Any) -> Any:
        """FlopCounterMode's count of one op, a float8 matmul's under ``aten._scaled_mm``
        (`counted_as`): the same formula (the shapes), the op that runs."""
        op = counted_as(func_packet, args)
        tracker = getattr(self, "mod_tracker", None)  # FlopCounterMode's, torch >= 2.4
        if op is func_packet or tracker is None or func_packet not in self.flop_registry:
            return super()._count_flops(func_packet, out, args, kwargs)
        flops = self.flop_registry[func_packet](*args, **kwargs, out_val=out)
        for parent in set(tracker.parents):
            self.flop_counts[parent][op] += flops
        return out

    def recomputed_by_op(self) -> dict[str, int]:
        """FLOPs of the recomputed forward, per op name (as `get_flop_counts` names them)."""
        live = self._recomputation
        return dict(live.by_op) if live is not None else dict(self._recomputed)

    def recomputed_flops(self) -> int:
        """FLOPs of the forward that checkpointing recomputed in backward (0 without it)."""
        return sum(self.recomputed_by_op().values())


def _force_eager() -> Any:
    """``torch.compiler.set_stance("force_eager")``, applied now and undone by its
    ``__exit__``; a no-op where torch (before 2.6) has no stances."""
    set_stance = getattr(torch.compiler, "set_stance", None)
    return set_stance("force_eager") if set_stance is not None else contextlib.nullcontext()
