"""Train a timm Vision Transformer with `accelkit.torch.fit`.

Shows: a `timm` model, its own data configuration, augmentation, optimizer
factory and label-smoothing loss, trained through `accelkit.torch.fit`. The
plan picks the precision for the GPU (bf16 on A100/H100/H200: no loss scaling);
the fit counts the ViT's FLOPs per step (attention included), so the report
gives MFU against the GPU's datasheet peak without any FLOP formula of yours.
Random weights (`pretrained=False`): nothing is downloaded; the images are
`torchvision.datasets.FakeData` through timm's own loader and training augmentation,
in batches accumulated to DeiT's global batch of 1024.

Run on a GPU:

    python examples/torch_fit_timm_vit.py --model vit_base_patch16_224

Smoke test (tiny sizes, a few steps):

    python examples/torch_fit_timm_vit.py --smoke
"""

from __future__ import annotations

import argparse

import timm
import torch
from timm.data import create_loader, resolve_data_config
from timm.loss import LabelSmoothingCrossEntropy
from timm.optim import create_optimizer_v2
from torchvision.datasets import FakeData

import accelkit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a few steps")
    parser.add_argument("--model", default="vit_base_patch16_224", help="a timm model name")
    args = parser.parse_args()
    # Per-GPU batch, image side, classes, images, loader workers, optimizer steps; with
    # accumulation, a global batch of 1024 (DeiT's) on one GPU.
    batch, size, classes, images, workers, steps, accumulation = 256, 224, 1000, 51_200, 8, 100, 4
    overrides = {"drop_path_rate": 0.1}
    if args.smoke:  # a two-block ViT-Tiny on 32x32 images cut in 8x8 patches
        args.model = "vit_tiny_patch16_224"
        batch, size, classes, images, workers, steps, accumulation = 8, 32, 10, 64, 0, 3, 2
        overrides = {"img_size": size, "patch_size": 8, "depth": 2}

    plan = accelkit.auto_configure()
    model = timm.create_model(args.model, pretrained=False, num_classes=classes, **overrides)
    config = resolve_data_config({"input_size": (3, size, size)}, model=model)
    # timm's loader with its training augmentation; no prefetcher: accelkit.torch.fit
    # copies the batches to the GPU itself (non-blocking, from pinned memory).
    loader = create_loader(
        FakeData(images, (3, size, size), classes),
        input_size=config["input_size"],
        batch_size=batch,
        is_training=True,
        use_prefetcher=False,
        interpolation=config["interpolation"],
        mean=config["mean"],
        std=config["std"],
        crop_pct=config["crop_pct"],
        num_workers=workers,
        pin_memory=torch.cuda.is_available(),
        persistent_workers=workers > 0,
    )
    # DeiT's recipe: AdamW at 5e-4 per 512 images, weight decay 0.05 (timm leaves the
    # norms, biases and position embeddings out of it), label smoothing 0.1.
    global_batch = batch * accumulation
    optimizer = create_optimizer_v2(model, "adamw", lr=5e-4 * global_batch / 512, weight_decay=0.05)
    millions = sum(p.numel() for p in model.parameters()) / 1e6
    print(f"{args.model}: {millions:.1f}M parameters, {size}x{size} images, "
          f"{global_batch} per optimizer step, precision {plan.precision.value}")  # fmt: skip

    report = accelkit.torch.fit(
        model,
        loader,
        optimizer,
        LabelSmoothingCrossEntropy(smoothing=0.1),
        epochs=300,  # a bound: steps= ends the measured run first
        steps=steps * accumulation,  # steps counts batches
        accumulation_steps=accumulation,  # DDP all-reduces once per optimizer step
        max_grad_norm=1.0,
        window=2 if args.smoke else 50,
    )
    print(report)


if __name__ == "__main__":
    main()
