"""A large batch's FLOPs from three small slices of it: the count's pass holds a few
samples' memory instead of the whole batch's.

Counting runs a real forward and backward pass under `FlopCounterMode`; on the whole
batch that pass can need more memory than a training step (up to 2.1x a checkpointed
GPT-2 step on an H200: benchmarks/flop_count_memory.py), a risk for a run that barely
fits. A step's FLOPs are affine in its batch size for the models people train: every
counted op (matmul, convolution, attention) runs per sample, plus what does not depend
on the batch (an op on the weights alone). So the step is counted on slices of 1, 2 and
3 samples; when the three counts lie on a line (c3 - c2 == c2 - c1, exactly, op by
op), the batch of B samples has c1 + (B - 1) x (c2 - c1). A count that is not affine (a
contrastive loss's B x B logits, routing that depends on the batch) fails that check,
and the batch is counted whole.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from accelkit.profiling import torch_batches
from accelkit.profiling.flop_count import FlopCount

SLICES = (1, 2, 3)  # samples per counted slice: three points test the line
SLICE_FROM = 8  # smaller batches are counted whole: slices would save little memory


def head(value: Any, samples: int, size: int) -> tuple[Any, bool]:
    """`value` with every tensor whose first dimension is `size` cut to its first
    `samples` (tuples, lists and mappings walked, other values kept), and whether any
    tensor was cut.

    Example:
        >>> import torch
        >>> cut, found = head({"ids": torch.zeros(8, 5), "n": 3}, 2, 8)
        >>> cut["ids"].shape, cut["n"], found
        (torch.Size([2, 5]), 3, True)
    """
    if torch_batches.is_tensor(value):
        if value.dim() and value.shape[0] == size:
            return value[:samples], True
        return value, False
    if isinstance(value, Mapping):
        items = {key: head(item, samples, size) for key, item in value.items()}
        cut = {key: item for key, (item, _) in items.items()}
        return _rebuilt(value, cut), any(found for _, found in items.values())
    if isinstance(value, (tuple, list)):
        parts = [head(item, samples, size) for item in value]
        made = [item for item, _ in parts]
        rebuilt = type(value)(*made) if hasattr(value, "_fields") else type(value)(made)
        return rebuilt, any(found for _, found in parts)
    return value, False


def _rebuilt(mapping: Mapping[Any, Any], items: dict[Any, Any]) -> Any:
    """A mapping of `mapping`'s type with `items` (a plain dict where the type cannot be
    made from one)."""
    make: Any = type(mapping)
    try:
        return make(items)
    except Exception:  # noqa: BLE001 - a mapping type of the user's own
        return items


def extrapolated(
    count_on: Callable[[Any, Any], FlopCount], inputs: Any, targets: Any
) -> FlopCount | None:
    """The batch's count from its slices (see the module docstring), or None: a small
    batch, one with nothing to slice, a slice that could not be counted, or counts that
    are not affine in the batch size (the caller then counts the batch whole).

    Args:
        count_on: counts one step on ``(inputs, targets)`` (`count_train_step_flops`).
        inputs, targets: the batch as the step takes it.
    """
    size = torch_batches.batch_size(inputs)
    if size is None or size < SLICE_FROM:
        return None
    counts = []
    for samples in SLICES:
        cut, found = head(inputs, samples, size)
        cut_targets, found_targets = head(targets, samples, size)
        if not found and not found_targets:
            return None
        count = count_on(cut, cut_targets)
        if count.total is None:
            return None
        counts.append(count)
    return _on_the_line(counts, size)


def _on_the_line(counts: list[FlopCount], size: int) -> FlopCount | None:
    one, two, three = counts
    ops = set(one.by_op) | set(two.by_op) | set(three.by_op)
    figures = {
        "total": (one.total, two.total, three.total),
        "forward": (one.forward, two.forward, three.forward),
        "recomputed": (one.recomputed, two.recomputed, three.recomputed),
        **{op: (one.by_op.get(op, 0), two.by_op.get(op, 0), three.by_op.get(op, 0)) for op in ops},
    }
    at_size: dict[str, int | None] = {}
    for name, (a, b, c) in figures.items():
        if a is None or b is None or c is None:
            at_size[name] = None
            continue
        if c - b != b - a:
            return None
        at_size[name] = a + (size - 1) * (b - a)
    total = at_size.pop("total")
    forward, recomputed = at_size.pop("forward"), at_size.pop("recomputed")
    note = (
        f"counted on slices of {', '.join(map(str, SLICES))} samples and extrapolated to "
        f"the batch's {size} (the counts affine in the batch size, op by op)"
    )
    return FlopCount(
        total=total,
        forward=forward,
        by_op={op: n for op, n in at_size.items() if n},
        method=one.method,
        notes=(*one.notes, note),
        recomputed=recomputed,
    )
