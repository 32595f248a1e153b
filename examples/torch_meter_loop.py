"""Measure your own PyTorch training loop with `accelkit.torch.Meter`.

Shows: a hand-written loop (a small decoder-only language model on token ids)
kept exactly as it is, with `accelkit.torch.Meter` around it: `with meter:` for
the run, `with meter.step(batch):` for each step. The meter counts one step's
FLOPs itself, times steps without synchronising the GPU every step, finds the
tokens in the (batch, sequence) ids, samples the GPU through NVML, and builds the
same `RunReport` as `accelkit.torch.fit`: samples/s, tokens/s, MFU against the
GPU's datasheet peak, input wait, and ranked advice.

Run on a GPU:

    python examples/torch_meter_loop.py --save meter_run.json

Smoke test (tiny sizes, a few steps, fine on a CPU):

    python examples/torch_meter_loop.py --smoke
"""

from __future__ import annotations

import argparse
import math

import torch
from torch import nn
from torch.nn import functional as F

import accelkit


class TinyGPT(nn.Module):
    """Token and position embeddings, pre-norm causal Transformer blocks, a tied LM head."""

    def __init__(self, vocab: int, context: int, dim: int, layers: int, heads: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(context, dim)
        block = nn.TransformerEncoderLayer(
            dim, heads, dim_feedforward=4 * dim, dropout=0.0, activation="gelu",
            batch_first=True, norm_first=True,
        )  # fmt: skip
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tokens.weight
        for embedding in (self.tokens, self.positions):  # GPT-2's initialisation
            nn.init.normal_(embedding.weight, std=0.02)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        length = ids.shape[1]
        x = self.tokens(ids) + self.positions(torch.arange(length, device=ids.device))
        mask = nn.Transformer.generate_square_subsequent_mask(length, device=ids.device)
        return self.head(self.norm(self.blocks(x, mask=mask, is_causal=True)))


class RandomTokens(torch.utils.data.IterableDataset):
    """An endless stream of (ids, next ids) windows from a fixed random token sequence:
    stands in for a tokenized corpus."""

    def __init__(self, vocab: int, context: int, length: int = 1_000_000) -> None:
        self.context = context
        self.corpus = torch.randint(0, vocab, (length,), generator=torch.Generator().manual_seed(0))

    def __iter__(self):
        generator = torch.Generator().manual_seed(torch.initial_seed() % 2**31)
        while True:
            start = int(
                torch.randint(0, len(self.corpus) - self.context - 1, (1,), generator=generator)
            )
            window = self.corpus[start : start + self.context + 1]
            yield window[:-1], window[1:]


# GPT-2 small on 512-token windows for a GPU run; a toy of it for the smoke test.
FULL = {"vocab": 32_000, "context": 512, "dim": 768, "layers": 12, "heads": 12,
        "batch": 32, "steps": 300, "window": 50, "workers": 2}  # fmt: skip
SMOKE = {"vocab": 256, "context": 32, "dim": 64, "layers": 2, "heads": 2,
         "batch": 4, "steps": 12, "window": 4, "workers": 0}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a few steps")
    parser.add_argument("--save", help="write the run report to this JSON file")
    args = parser.parse_args()
    size = SMOKE if args.smoke else FULL
    vocab, window, steps = size["vocab"], size["window"], size["steps"]

    plan = accelkit.auto_configure()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    model = TinyGPT(vocab, size["context"], size["dim"], size["layers"], size["heads"])
    model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    scaler = plan.grad_scaler()
    loader = torch.utils.data.DataLoader(
        RandomTokens(vocab, size["context"]),
        batch_size=size["batch"],
        num_workers=size["workers"],
        pin_memory=device.type == "cuda",
    )
    print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters on {device}")

    # The meter reads the GPU's peak for the plan's precision and the loss scale
    # from the scaler; window: steps between device synchronisations.
    meter = accelkit.torch.Meter(model, optimizer=optimizer, grad_scaler=scaler, window=window)
    with meter:
        for step, batch in enumerate(loader, start=1):
            with meter.step(batch):
                ids, targets = (t.to(device, non_blocking=True) for t in batch)
                with plan.autocast():
                    logits = model(ids)
                    loss = F.cross_entropy(logits.view(-1, vocab), targets.view(-1))
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
                if step % window == 0 or step == steps:
                    # .item() waits for the GPU: once a window, and inside the step, so
                    # the wait counts as step time, not as time waiting for input.
                    value = loss.item()
                    meter.record_loss(value)
            if step % window == 0 or step == steps:
                print(f"step {step}: loss {value:.3f} (perplexity {math.exp(value):,.0f})")
            if step == steps:
                break

    report = meter.report()
    print(report)
    # A figure that could not be measured is None, with the reason in report.notes.
    mfu = "unknown" if report.mfu is None else f"{report.mfu:.1%}"
    print(f"MFU {mfu}, {report.tokens_per_second:,.0f} tokens/s, {len(report.advice)} advice")
    if args.save:
        report.save(args.save)  # `accelkit report FILE` renders it again, with advice
        print(f"saved {args.save}")


if __name__ == "__main__":
    main()
