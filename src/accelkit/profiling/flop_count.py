"""The FLOP count of one training step, shared by the PyTorch and TensorFlow counters."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class FlopCount:
    """FLOPs of one training step (forward + loss + backward) on one batch.

    Convention, the one MFU figures use (PaLM appendix B; Lightning's
    `measure_flops`): a multiply-add counts as 2 FLOPs; matmul-like ops
    (matmul, convolution, attention) are counted in the forward and the
    backward pass; elementwise ops, normalisation and the optimizer update are
    not counted.

    Attributes:
        total: FLOPs of forward + backward for the batch; None when they could
            not be counted (the reason is in `notes`).
        forward: FLOPs of the forward pass alone (loss included); None when unknown.
        by_op: FLOPs of forward + backward per op name, e.g. ``{"aten.mm": 123}``.
        method: how the figures were obtained, e.g. "torch FlopCounterMode".
        notes: anything a reader of the figures should know (what was assumed,
            why a figure is missing).

    Example:
        >>> FlopCount(total=6, forward=2, by_op={"aten.mm": 6}, method="analytic")
        FlopCount(total=6, forward=2, by_op={'aten.mm': 6}, method='analytic', notes=())
    """

    total: int | None
    forward: int | None
    by_op: dict[str, int] = field(default_factory=dict)
    method: str = ""
    notes: tuple[str, ...] = ()
