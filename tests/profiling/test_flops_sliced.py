"""A batch's FLOPs counted on slices of it (profiling/flops_sliced.py): the same count as
the whole batch, exactly, wherever the counts are affine in the batch size; the whole
batch counted where they are not."""

from __future__ import annotations

from typing import Any, NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

from accelkit.profiling import flops_sliced, flops_torch

from ..helpers.torch_data import mlp


def _whole(model, inputs, targets=None, loss_fn=None):
    return flops_torch._count_whole(model, inputs, targets, loss_fn, None)


def _same(sliced, whole) -> None:
    assert (sliced.total, sliced.forward, sliced.recomputed) == (
        whole.total,
        whole.forward,
        whole.recomputed,
    )
    assert sliced.by_op == {op: n for op, n in whole.by_op.items() if n}


class ConvNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
            torch.nn.Conv2d(8, 8, 3, groups=2), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
            torch.nn.Linear(8, 5),
        )  # fmt: skip

    def forward(self, x):
        return self.body(x)


@settings(max_examples=12, deadline=None)
@given(size=st.integers(8, 40), kind=st.sampled_from(["mlp", "conv"]))
def test_slices_give_the_whole_batchs_count(size: int, kind: str) -> None:
    model, shape = (mlp(16, 32, 4), (16,)) if kind == "mlp" else (ConvNet(), (3, 12, 12))
    x, y = torch.randn(size, *shape), torch.randint(0, 4, (size,))
    loss = torch.nn.functional.cross_entropy
    sliced = flops_torch.count_train_step_flops(model, x, y, loss, sliced=True)
    assert "extrapolated" in sliced.notes[-1]
    _same(sliced, _whole(model, x, y, loss))


def test_a_transformer_with_checkpointing_is_counted_on_slices_exactly() -> None:
    pytest.importorskip("transformers")
    from ..helpers.transformers_models import gpt2

    model = gpt2(layers=2)
    model.gradient_checkpointing_enable()
    ids = torch.randint(0, 1000, (9, 32))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}
    sliced = flops_torch.count_train_step_flops(model, batch, sliced=True)
    assert sliced.recomputed and "extrapolated" in sliced.notes[-1]
    _same(sliced, _whole(model, batch))


class Contrastive(torch.nn.Module):
    """In-batch negatives: a B x B similarity matrix, FLOPs quadratic in the batch."""

    def __init__(self) -> None:
        super().__init__()
        self.project = torch.nn.Linear(16, 16)

    def forward(self, x):
        z = self.project(x)
        return torch.nn.functional.cross_entropy(z @ z.T, torch.arange(len(x)))


def test_counts_that_are_not_affine_in_the_batch_are_counted_whole() -> None:
    x = torch.randn(12, 16)
    model = Contrastive()
    count = flops_torch.count_train_step_flops(model, x, sliced=True)
    assert not any("extrapolated" in note for note in count.notes)
    assert count.total == _whole(model, x).total


def test_small_batches_and_batches_without_a_batch_dimension_are_counted_whole() -> None:
    model = mlp(16, 4)
    small = flops_torch.count_train_step_flops(model, torch.randn(4, 16), sliced=True)
    assert small.total == 2 * 4 * 16 * 4 * 2  # 2 per multiply-add, forward + weight gradient
    assert not any("extrapolated" in note for note in small.notes)
    images = [torch.randn(3, 8, 8) for _ in range(10)]  # a detection batch: a list of images
    assert flops_sliced.head(images, 2, 10) == (images, False)


class Pair(NamedTuple):
    x: Any
    y: Any


def test_head_keeps_the_batchs_structure() -> None:
    batch = Pair(torch.zeros(10, 3), {"ids": torch.zeros(10, 4, dtype=torch.long), "k": 7})
    cut, found = flops_sliced.head(batch, 3, 10)
    assert found and isinstance(cut, Pair)
    assert cut.x.shape == (3, 3) and cut.y["ids"].shape == (3, 4) and cut.y["k"] == 7


def test_on_the_cpu_the_batch_is_counted_whole_unless_asked() -> None:
    """A script sees one extra forward pass on the CPU (its loss function called once)."""
    calls = []

    def loss(output, target):
        calls.append(1)
        return torch.nn.functional.cross_entropy(output, target)

    x, y = torch.randn(16, 16), torch.randint(0, 4, (16,))
    count = flops_torch.count_train_step_flops(mlp(16, 4), x, y, loss)
    assert len(calls) == 1 and not any("extrapolated" in note for note in count.notes)
    with pytest.raises(ValueError, match="sliced='yes' is not valid"):
        flops_torch.count_train_step_flops(mlp(16, 4), x, y, loss, sliced="yes")
