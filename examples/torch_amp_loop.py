"""A plain PyTorch training loop that takes its precision from accelkit's plan.

Shows: `accelkit.auto_configure()` detecting the GPU and choosing the precision
(bf16 on A100/H100/H200, fp16 with loss scaling on T4/V100, fp32 elsewhere), then
`plan.autocast()` and `plan.grad_scaler()` in a loop you keep writing yourself. Both
are no-ops where the plan does not call for them, so the same loop runs everywhere.
The loss is computed inside autocast on the model's output as it is: PyTorch runs
cross-entropy in float32 under autocast, so no `.float()` cast is needed.

Run on a GPU:

    python examples/torch_amp_loop.py

Smoke test (tiny sizes, a few steps, fine on a CPU):

    python examples/torch_amp_loop.py --smoke
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

import accelkit


def make_data(samples: int, features: int, classes: int) -> torch.utils.data.TensorDataset:
    """A synthetic tabular classification task: the class is the argmax of a fixed
    random projection, which a small MLP learns in a few epochs."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(samples, features, generator=generator)
    y = (x @ torch.randn(features, classes, generator=generator)).argmax(dim=1)
    return torch.utils.data.TensorDataset(x, y)


def make_model(features: int, hidden: int, classes: int) -> nn.Module:
    return nn.Sequential(
        nn.Linear(features, hidden),
        nn.GELU(),
        nn.LayerNorm(hidden),
        nn.Linear(hidden, hidden),
        nn.GELU(),
        nn.Linear(hidden, classes),
    )


@torch.no_grad()
def accuracy(model: nn.Module, loader, device, plan) -> float:
    model.eval()
    correct = total = 0
    for batch in loader:
        x, y = (t.to(device, non_blocking=True) for t in batch)
        with plan.autocast():
            correct += (model(x).argmax(dim=1) == y).sum().item()
        total += y.numel()
    model.train()
    return correct / total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a few steps")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--lr", type=float, default=1e-3)
    args = parser.parse_args()
    samples, features, hidden, classes = 262_144, 256, 2048, 100
    if args.smoke:
        args.epochs, args.batch_size = 2, 64
        samples, features, hidden, classes = 1024, 32, 64, 10

    plan = accelkit.auto_configure()  # prints the plan table, with a reason per setting
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    print(f"precision {plan.precision.value} on {device}")

    data = make_data(samples, features, classes)
    train, held_out = torch.utils.data.random_split(
        data, [0.9, 0.1], generator=torch.Generator().manual_seed(0)
    )
    pin = device.type == "cuda"
    loader = torch.utils.data.DataLoader(
        train, batch_size=args.batch_size, shuffle=True, drop_last=True, pin_memory=pin
    )
    eval_loader = torch.utils.data.DataLoader(held_out, batch_size=args.batch_size)

    model = make_model(features, hidden, classes).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=args.lr, total_steps=args.epochs * len(loader)
    )
    loss_fn = nn.CrossEntropyLoss()
    scaler = plan.grad_scaler()  # enabled for fp16 plans only

    for epoch in range(args.epochs):
        start, seen = time.perf_counter(), 0
        total_loss = torch.zeros((), device=device)  # summed on the device: no sync per step
        for batch in loader:
            x, y = (t.to(device, non_blocking=True) for t in batch)
            with plan.autocast():  # bf16/fp16 autocast, or nothing for fp32/tf32 plans
                loss = loss_fn(model(x), y)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
            nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            scheduler.step()
            total_loss += loss.detach().float() * len(y)
            seen += len(y)
        epoch_loss = total_loss.item() / seen  # waits for the epoch's last step
        seconds = time.perf_counter() - start
        print(
            f"epoch {epoch + 1}/{args.epochs}: loss {epoch_loss:.4f}, "
            f"{seen / seconds:,.0f} samples/s, held-out accuracy "
            f"{accuracy(model, eval_loader, device, plan):.1%}"
        )


if __name__ == "__main__":
    main()
