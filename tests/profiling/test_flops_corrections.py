"""Where PyTorch's FLOP formulas miscount and accelkit's counter corrects them: grouped
(depthwise) convolutions' weight gradient, and grouped-query attention."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from accelkit.profiling.flops_torch import count_train_step_flops

pytestmark = pytest.mark.torch


CHANNELS = 32


@pytest.mark.parametrize(
    ("layer", "macs_per_position"),
    [
        (nn.Conv2d(CHANNELS, CHANNELS, 7, padding=3), CHANNELS * CHANNELS * 7 * 7),
        (nn.Conv2d(CHANNELS, CHANNELS, 7, padding=3, groups=4), CHANNELS * CHANNELS // 4 * 7 * 7),
        (nn.Conv2d(CHANNELS, CHANNELS, 7, padding=3, groups=CHANNELS), CHANNELS * 7 * 7),
        # A transposed convolution: each input position meets every weight of its group.
        (
            nn.ConvTranspose2d(CHANNELS, CHANNELS, 2, stride=2, groups=4),
            CHANNELS * CHANNELS // 4 * 4,
        ),
    ],
    ids=["dense", "groups=4", "depthwise", "transposed groups=4"],
)
def test_a_grouped_convolution_costs_its_forward_once_per_gradient(layer, macs_per_position):
    """PyTorch's formula counted the weight gradient over all input channels, not the
    group's: `groups` times too many (ConvNeXt's depthwise 7x7 counted 2.9x its step)."""
    batch, side = 2, 16
    model = nn.Sequential(nn.Conv2d(3, CHANNELS, 1), layer)  # the data's layer: weight grad only
    first = 2 * batch * side * side * CHANNELS * 3
    grouped = 2 * batch * side * side * macs_per_position  # per input (transposed) or output

    count = count_train_step_flops(model, torch.randn(batch, 3, side, side))

    assert count.forward == first + grouped
    assert count.total == 2 * first + 3 * grouped


class _Attention(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.q = nn.Linear(dim, dim, bias=False)
        self.kv = nn.Linear(dim, 2 * kv_heads * self.head_dim, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        q = self.q(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k, v = (
            z.view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
            for z in self.kv(x).chunk(2, dim=-1)
        )
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def test_grouped_query_attention_is_counted_over_every_query_head():
    """PyTorch 2.11's formula refused keys and values with fewer heads than the query
    (the step was not counted at all: Llama, Mistral, Qwen)."""
    batch, length, dim, heads, kv_heads = 2, 32, 64, 8, 2
    model = _Attention(dim, heads, kv_heads)

    count = count_train_step_flops(model, torch.randn(batch, length, dim, requires_grad=True))

    # QKᵀ and AV over all 8 query heads: 4·B·T²·d forward, 8·B·T²·d backward (the
    # kernel's recomputation of QKᵀ left out, as for any fused attention).
    attention = sum(n for op, n in count.by_op.items() if "attention" in op)
    assert attention - 2 * batch * length * length * dim == 12 * batch * length * length * dim
    projections = 2 * batch * length * (dim * dim + dim * 2 * kv_heads * dim // heads)
    assert count.total == 3 * projections + 12 * batch * length * length * dim
