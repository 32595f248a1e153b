"""FLOPs of one PyTorch training step, against formulas worked out by hand.

Convention (see `accelkit.profiling.flops_torch`): multiply-add = 2 FLOPs; a
matmul's backward is 2x its forward (input grad + weight grad), or 1x where its
input needs no grad (the first layer, fed by data).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from accelkit.profiling.flops_torch import count_train_step_flops

from ..helpers.torch_data import mlp

pytestmark = pytest.mark.torch


def test_mlp_counts_match_the_formula_exactly():
    batch, sizes = 32, [(784, 256), (256, 10)]
    model = mlp(784, 256, 10)
    x, y = torch.randn(batch, 784), torch.randint(0, 10, (batch,))

    count = count_train_step_flops(model, x, y, F.cross_entropy)

    forward = sum(2 * batch * d * k for d, k in sizes)  # 13,008,896
    first_layer_input_grad = 2 * batch * 784 * 256  # not computed: x needs no grad
    assert count.forward == forward
    assert count.total == 3 * forward - first_layer_input_grad  # 26,181,632
    assert sum(count.by_op.values()) == count.total
    assert count.by_op["aten.addmm"] == forward  # the forward Linear layers


def test_cnn_counts_match_the_formula_exactly():
    batch, channels, side, classes = 8, 16, 32, 10
    model = nn.Sequential(
        nn.Conv2d(3, channels, 3, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(channels * side * side, classes),
    )
    x, y = torch.randn(batch, 3, side, side), torch.randint(0, classes, (batch,))

    count = count_train_step_flops(model, x, y, F.cross_entropy)

    conv = 2 * batch * channels * side * side * 3 * 3 * 3  # each output: 3·3·3 multiply-adds
    linear = 2 * batch * channels * side * side * classes
    assert count.forward == conv + linear
    # The conv's input is the data: its backward computes the weight grad only (1x).
    assert count.total == 2 * conv + 3 * linear
    assert count.by_op["aten.convolution_backward"] == conv


class _Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm2(x))


class _GPT(nn.Module):
    """nanoGPT-shaped: returns (logits, loss) when given targets."""

    def __init__(self, vocab: int, context: int, dim: int, heads: int, layers: int) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Embedding(context, dim)
        self.blocks = nn.ModuleList(_Block(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx, targets=None):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))
        loss = None if targets is None else F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss


def test_gpt_counts_match_6NT_plus_attention():
    vocab, context, dim, heads, layers, batch = 256, 64, 64, 4, 2, 4
    model = _GPT(vocab, context, dim, heads, layers)
    idx = torch.randint(0, vocab, (batch, context))
    tokens = batch * context

    count = count_train_step_flops(model, (idx, idx))  # the model returns its own loss

    # Matmul weights: per layer qkv 3D² + proj D² + MLP 8D² = 12D², plus the LM head D·V;
    # embeddings are lookups (no FLOPs). Every matmul's input needs grad (the embeddings
    # are trained), so each costs 2·N·tokens forward and 4·N·tokens backward: 6·N·tokens.
    n_matmul = layers * 12 * dim * dim + dim * vocab
    # Fused attention over the full T×T scores (the causal mask is not discounted):
    # forward QKᵀ + AV = 4·B·T²·D per layer; backward dQ, dK, dV, dScores = 8·B·T²·D.
    # The fused kernel also recomputes QKᵀ in backward (2·B·T²·D per layer, counted by
    # FlopCounterMode's own formula): hardware work, left out of model FLOPs.
    attention_forward = layers * 4 * batch * context * context * dim
    attention_backward = layers * 8 * batch * context * context * dim
    recompute = layers * 2 * batch * context * context * dim
    assert count.forward == 2 * n_matmul * tokens + attention_forward  # 67,108,864
    # 201,326,592 = PaLM appendix B, 6N + 12·L·T·D per token, exactly:
    assert count.total == 6 * n_matmul * tokens + attention_forward + attention_backward
    palm = 6 * n_matmul * tokens + 12 * layers * context * dim * tokens
    assert count.total == palm
    attention_ops = sum(flops for op, flops in count.by_op.items() if "attention" in op)
    assert attention_ops == attention_forward + attention_backward + recompute, (
        "SDPA must be counted, not 0"
    )
    assert any("recomputation" in note for note in count.notes)
    assert any("scalar loss the model returned" in note for note in count.notes)


def test_model_state_is_restored():
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Dropout(0.5), nn.Linear(16, 2))
    model.train()
    model[3].eval()  # a mixed-mode model must come back mixed
    running_mean = model[1].running_mean.clone()
    running_var = model[1].running_var.clone()
    tracked = model[1].num_batches_tracked.clone()
    model[0].weight.grad = torch.ones_like(model[0].weight)  # an accumulated grad must survive
    kept_grad = model[0].weight.grad
    weights = [p.detach().clone() for p in model.parameters()]
    x = torch.randn(32, 8) * 5 + 3
    rng = torch.get_rng_state()

    count = count_train_step_flops(model, x)

    assert count.total and count.total > 0
    assert model[0].weight.grad is kept_grad and torch.equal(kept_grad, torch.ones_like(kept_grad))
    assert all(p.grad is None for name, p in model.named_parameters() if name != "0.weight")
    assert torch.equal(model[1].running_mean, running_mean)
    assert torch.equal(model[1].running_var, running_var)
    assert torch.equal(model[1].num_batches_tracked, tracked)
    assert [m.training for m in model] == [True, True, True, False]
    assert all(torch.equal(p, w) for p, w in zip(model.parameters(), weights, strict=True))
    assert torch.equal(torch.get_rng_state(), rng)  # dropout's draws are undone


def test_dict_inputs_and_autocast_factory():
    class Named(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, features):
            return {"logits": self.fc(features)}

    entered = []

    def autocast():
        entered.append(True)
        return torch.autocast("cpu", dtype=torch.bfloat16)

    count = count_train_step_flops(Named(), {"features": torch.randn(5, 4)}, autocast=autocast)

    assert entered == [True]
    assert count.total == 2 * (2 * 5 * 4 * 3)  # forward + weight grad (input needs none)
    assert any("sum of the model's outputs" in note for note in count.notes)


@pytest.mark.filterwarnings("ignore::DeprecationWarning:torch.*")  # torch.compile's own imports
def test_a_compiled_module_is_counted_through_the_module_it_wraps():
    model = nn.Linear(4, 2)

    count = count_train_step_flops(torch.compile(model), torch.randn(8, 4))

    assert count.total == 2 * (2 * 8 * 4 * 2)
    assert any("torch.compile" in note for note in count.notes)


def test_a_failing_model_gives_none_with_a_note():
    class Broken(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return self.fc(x) @ torch.randn(3, 3)  # shape mismatch

    model = Broken()

    count = count_train_step_flops(model, torch.randn(2, 4))

    assert count.total is None
    assert any(note.startswith("FLOP counting failed: RuntimeError") for note in count.notes)
    assert model.fc.weight.grad is None


def test_a_frozen_model_has_no_backward_to_count():
    model = nn.Linear(4, 4).requires_grad_(False)

    count = count_train_step_flops(model, torch.randn(2, 4))

    assert count.total is None and count.forward == 2 * 2 * 4 * 4
    assert any("does not require grad" in note for note in count.notes)
