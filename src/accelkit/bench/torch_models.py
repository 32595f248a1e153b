"""Built-in PyTorch models and synthetic data for `accelkit bench`.

- `mlp`: 3-layer perceptron on 784-feature vectors (MNIST-sized).
- `cnn`: a small convolution net on 3x32x32 images (CIFAR-sized).
- `gpt`: a small GPT (4 layers, width 256, 256 tokens) for CPUs.
- `gpt2`: GPT-2 small (124M parameters, 1024 tokens), for GPUs.
- `resnet50`: torchvision's ResNet-50 on 224x224 images (needs torchvision).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F


@dataclasses.dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 50304  # GPT-2's 50257 rounded up to a multiple of 64 (nanoGPT)
    block_size: int = 1024
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.qkv = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.proj = nn.Linear(config.n_embd, config.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=2)
        shape = (batch, length, self.n_head, width // self.n_head)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).contiguous().view(batch, length, width))


class Block(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(config.n_embd, 4 * config.n_embd),
            nn.GELU(),
            nn.Linear(4 * config.n_embd, config.n_embd),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """A GPT-2 style decoder; returns logits (B, T, vocab). The LM head shares the
    token embedding's weight, as in GPT-2."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight
        self.apply(self._init)

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(positions)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))

    def matmul_params(self) -> int:
        """Parameters that take part in matmuls per token: everything but the
        embeddings' lookups, with the LM head (tied to wte) counted once."""
        embeddings = self.wpe.weight.numel()
        biases_and_norms = sum(p.numel() for n, p in self.named_parameters() if p.dim() == 1)
        return sum(p.numel() for p in self.parameters()) - embeddings - biases_and_norms


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


class SyntheticBatches:
    """`steps` batches of one fixed random batch, already on `device` (so the input
    pipeline costs nothing and the run measures the model)."""

    def __init__(self, batch: Any, steps: int) -> None:
        self.batch, self.steps = batch, steps

    def __iter__(self) -> Any:
        return (self.batch for _ in range(self.steps))

    def __len__(self) -> int:
        return self.steps


def gpt_flops_per_token(config: GPTConfig, matmul_params: int) -> float:
    """Training FLOPs per token, 6·N + 12·L·T·d (PaLM appendix B: 6N + 12·L·H·Q·T with
    H·Q = d). N counts matmul weights; attention is counted over the full T×T
    score matrix, as FlopCounterMode counts causal attention too."""
    return 6 * matmul_params + 12 * config.n_layer * config.block_size * config.n_embd


def build(
    name: str, batch_size: int | None, device: Any
) -> tuple[nn.Module, Any, Any, dict[str, Any]]:
    """(model, one synthetic batch on `device`, loss_fn, facts) for a built-in model."""
    builder = _BUILDERS.get(name)
    if builder is None:
        raise ValueError(
            f"model={name!r} is not a built-in PyTorch model; use one of {', '.join(MODELS)}"
        )
    model, batch, loss_fn, facts = builder(name, batch_size, torch.Generator().manual_seed(0))
    return model, tuple(tensor.to(device) for tensor in batch), loss_fn, facts


Built = tuple[nn.Module, tuple[Any, Any], Any, dict[str, Any]]  # the batch on the CPU


def _mlp(name: str, batch_size: int | None, generator: Any) -> Built:
    batch_size = batch_size or 256
    model = nn.Sequential(
        nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)
    )
    x = torch.randn(batch_size, 784, generator=generator)
    y = torch.randint(0, 10, (batch_size,), generator=generator)
    return model, (x, y), nn.CrossEntropyLoss(), {}


def _cnn(name: str, batch_size: int | None, generator: Any) -> Built:
    batch_size = batch_size or 128
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(64, 128, 3, padding=1),
        nn.BatchNorm2d(128),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(128 * 8 * 8, 10),
    )
    x = torch.randn(batch_size, 3, 32, 32, generator=generator)
    y = torch.randint(0, 10, (batch_size,), generator=generator)
    return model, (x, y), nn.CrossEntropyLoss(), {}


def _gpt(name: str, batch_size: int | None, generator: Any) -> Built:
    """ "gpt": a small GPT (4 layers of 256); "gpt2": GPT-2 small's shape."""
    config = (
        GPTConfig(vocab_size=4096, block_size=256, n_layer=4, n_head=4, n_embd=256)
        if name == "gpt"
        else GPTConfig()
    )
    batch_size = batch_size or (8 if name == "gpt" else 16)
    model = GPT(config)
    tokens = torch.randint(
        0, config.vocab_size, (batch_size, config.block_size + 1), generator=generator
    )
    facts = {
        "tokens_per_sample": config.block_size,
        "analytic_flops_per_step": batch_size
        * config.block_size
        * gpt_flops_per_token(config, model.matmul_params()),
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    return model, (tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()), lm_loss, facts


def _resnet50(name: str, batch_size: int | None, generator: Any) -> Built:
    try:
        import torchvision
    except ImportError as error:
        raise ValueError("model 'resnet50' needs torchvision (pip install torchvision)") from error
    batch_size = batch_size or 64
    model = torchvision.models.resnet50()
    x = torch.randn(batch_size, 3, 224, 224, generator=generator)
    y = torch.randint(0, 1000, (batch_size,), generator=generator)
    return model, (x, y), nn.CrossEntropyLoss(), {}


_BUILDERS = {"mlp": _mlp, "cnn": _cnn, "gpt": _gpt, "gpt2": _gpt, "resnet50": _resnet50}
MODELS = ("mlp", "cnn", "gpt", "gpt2", "resnet50")
