"""Data-parallel PyTorch training under `torchrun`, set up and measured by accelkit.

Shows: the same script on one GPU or many. Under `torchrun`,
`accelkit.auto_configure()` pins each rank to its GPU, sets the NCCL variables
the topology calls for and starts the process group (NCCL on GPUs, gloo on
CPUs); `accelkit.torch.fit` wraps the model in `DistributedDataParallel` and
gives the `DataLoader` a `DistributedSampler`, so each rank trains on its share.
Every rank gets the report of the whole run: `world_size`, all ranks'
samples/s, the slowest rank, and with `--single-device` the scaling efficiency.
Only rank 0 prints; `report.save` writes on rank 0 only.

Run on a machine with 8 GPUs (first on one GPU, for the scaling reference):

    python examples/torch_ddp.py --save one_gpu.json
    torchrun --standalone --nproc-per-node 8 examples/torch_ddp.py --single-device one_gpu.json

Smoke test (two CPU processes over gloo, tiny sizes, a few steps):

    torchrun --standalone --nproc-per-node 2 examples/torch_ddp.py --smoke
"""

from __future__ import annotations

import argparse
import os

import torch
from torch import nn

import accelkit


def conv_net(classes: int, width: int) -> nn.Module:
    """A VGG-style CIFAR network: three conv stages, then a linear classifier."""

    def stage(inputs: int, outputs: int) -> list[nn.Module]:
        return [
            nn.Conv2d(inputs, outputs, 3, padding=1, bias=False),
            nn.BatchNorm2d(outputs),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
        ]

    return nn.Sequential(
        *stage(3, width),
        *stage(width, 2 * width),
        *stage(2 * width, 4 * width),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4 * width, classes),
    )


def cifar_shaped(images: int, classes: int) -> torch.utils.data.TensorDataset:
    """Random 32x32 RGB images with labels: CIFAR-10's shape, no download."""
    generator = torch.Generator().manual_seed(0)  # the same data on every rank
    x = torch.randn(images, 3, 32, 32, generator=generator)
    return torch.utils.data.TensorDataset(
        x, torch.randint(0, classes, (images,), generator=generator)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a few steps")
    parser.add_argument("--single-device", help="a one-GPU run's report, for scaling efficiency")
    parser.add_argument("--save", help="write the run report to this JSON file (rank 0)")
    args = parser.parse_args()
    # Per-rank batch, images, conv width, epochs; the batch is per GPU.
    batch, images, width, epochs = 512, 50_000, 128, 3
    if args.smoke:
        batch, images, width, epochs = 16, 256, 8, 1

    plan = accelkit.auto_configure()  # under torchrun: the process group, this rank's GPU
    is_rank_zero = os.environ.get("RANK", "0") == "0"
    torch.manual_seed(0)  # DDP broadcasts rank 0's weights anyway
    model = conv_net(classes=10, width=width)
    loader = torch.utils.data.DataLoader(
        cifar_shaped(images, classes=10),
        batch_size=batch,
        shuffle=True,
        drop_last=True,
        pin_memory=torch.cuda.is_available(),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    report = accelkit.torch.fit(
        model,
        loader,
        optimizer,
        nn.CrossEntropyLoss(),
        epochs=epochs,
        window=2 if args.smoke else 20,
        single_device=args.single_device,
    )
    if is_rank_zero:
        print(f"distribution {plan.distribution.value}, world size {report.world_size}")
        print(report)
        print(f"global: {report.global_samples_per_second:,.0f} samples/s over all ranks")
    if args.save:
        report.save(args.save)  # rank 0 writes; the other ranks skip


if __name__ == "__main__":
    main()
