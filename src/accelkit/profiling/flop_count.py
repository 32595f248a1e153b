"""The FLOP count of one training step, shared by the PyTorch and TensorFlow counters."""

from __future__ import annotations

from dataclasses import dataclass, field

# The op of a float8 matmul with its scales (torch._scaled_mm), as `by_op` names it.
FLOAT8_OP = "_scaled_mm"


@dataclass(frozen=True)
class FlopCount:
    """FLOPs of one training step (forward + loss + backward) on one batch.

    Convention, the one MFU figures use (PaLM appendix B; Lightning's
    `measure_flops`): a multiply-add counts as 2 FLOPs; matmul-like ops
    (matmul, convolution, attention) are counted in the forward and the
    backward pass; elementwise ops, normalisation and the optimizer update are
    not counted.

    MFU is taken on model FLOPs, HFU on hardware FLOPs (PaLM appendix B): the forward
    that activation checkpointing recomputes in backward is hardware work, counted in
    `recomputed`, never in `total`.

    Attributes:
        total: model FLOPs of forward + backward for the batch (no recomputation);
            None when they could not be counted (the reason is in `notes`).
        forward: FLOPs of the forward pass alone (loss included); None when unknown.
        by_op: FLOPs per op name as the ops ran, e.g. ``{"aten.mm": 123}`` (any
            recomputation included).
        method: how the figures were obtained, e.g. "torch FlopCounterMode".
        notes: anything a reader of the figures should know (what was assumed,
            why a figure is missing).
        recomputed: FLOPs of the forward ops recomputed in backward (activation
            checkpointing): 0 when nothing was, None when the counter cannot tell.

    Example:
        >>> count = FlopCount(total=6, forward=2, by_op={"aten.mm": 8}, recomputed=2)
        >>> count.total, count.hardware
        (6, 8)
    """

    total: int | None
    forward: int | None
    by_op: dict[str, int] = field(default_factory=dict)
    method: str = ""
    notes: tuple[str, ...] = ()
    recomputed: int | None = 0

    @property
    def hardware(self) -> int | None:
        """FLOPs the hardware ran for the step: `total` plus the recomputed forward;
        None when either is unknown."""
        if self.total is None or self.recomputed is None:
            return None
        return self.total + self.recomputed

    @property
    def float8(self) -> int:
        """FLOPs of the matmuls that ran in float8 (``_scaled_mm``: torchao's
        ``Float8Linear``, forward and backward), 0 where none did.

        Example:
            >>> FlopCount(total=14, forward=6, by_op={"aten.mm": 8, "aten._scaled_mm": 6}).float8
            6
        """
        return sum(n for op, n in self.by_op.items() if op.rpartition(".")[2] == FLOAT8_OP)

    def __add__(self, other: FlopCount) -> FlopCount:
        """Two batches' counts as one step's (the micro-batches of one optimizer step): a
        figure unknown in either is unknown in the sum.

        Example:
            >>> one = FlopCount(total=6, forward=2, by_op={"aten.mm": 8}, method="m")
            >>> (one + one).total, (one + one).by_op
            (12, {'aten.mm': 16})
        """
        by_op = dict(self.by_op)
        for op, n in other.by_op.items():
            by_op[op] = by_op.get(op, 0) + n
        return FlopCount(
            total=_plus(self.total, other.total),
            forward=_plus(self.forward, other.forward),
            by_op=by_op,
            method=self.method or other.method,
            notes=tuple(dict.fromkeys(self.notes + other.notes)),
            recomputed=_plus(self.recomputed, other.recomputed),
        )


def _plus(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a + b


@dataclass(frozen=True)
class StepFlops:
    """The FLOPs of one training step as the clock adds them up, window by window: model
    FLOPs (MFU's), hardware FLOPs (HFU's: the recomputed forward included; None when
    not known) and the FLOPs that ran in float8.

    Example:
        >>> one = StepFlops.of(FlopCount(total=6, forward=2, by_op={"aten.mm": 8}, recomputed=2))
        >>> one
        StepFlops(model=6.0, hardware=8.0, float8=0.0)
        >>> one.times(3) + one
        StepFlops(model=24.0, hardware=32.0, float8=0.0)
    """

    model: float
    hardware: float | None = None
    float8: float = 0.0

    @classmethod
    def of(cls, count: FlopCount) -> StepFlops:
        """The figures of `count` (whose `total` is known)."""
        hardware = count.hardware
        return cls(
            float(count.total or 0), float(hardware) if hardware else None, float(count.float8)
        )

    def times(self, factor: float) -> StepFlops:
        """Every figure `factor` times over (a batch of `factor` samples of one shape)."""
        hardware = self.hardware * factor if self.hardware is not None else None
        return StepFlops(self.model * factor, hardware, self.float8 * factor)

    def __add__(self, other: StepFlops) -> StepFlops:
        hardware = (
            self.hardware + other.hardware
            if self.hardware is not None and other.hardware is not None
            else None
        )
        return StepFlops(self.model + other.model, hardware, self.float8 + other.float8)
