"""Train a torchvision ResNet on an image folder with `accelkit.torch.fit`.

Shows: the usual image-classification setup (torchvision model, transforms,
`DataLoader` with worker processes and pinned memory) handed to
`accelkit.torch.fit`, which applies the plan (bf16/fp16 autocast with the loss
inside it, channels-last for the convolutions, cuDNN autotuning, TF32) and
measures the run: images/s, FLOPs per step counted from the model, MFU against
the GPU's datasheet peak, and how long each step waited for the loader. If the
workers cannot keep up, the advice says how many to add.

Without `--data-dir` it trains on `torchvision.datasets.FakeData` (random
images decoded and transformed like real ones), so it runs anywhere.

Run on a GPU (ImageNet layout: DIR/train/<class>/*.jpeg):

    python examples/torch_fit_resnet.py --arch resnet50 --data-dir /data/imagenet

Smoke test (tiny sizes, a few steps):

    python examples/torch_fit_resnet.py --smoke
"""

from __future__ import annotations

import argparse
import os

import torch
import torchvision
from torchvision import datasets, transforms

import accelkit

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def make_dataset(data_dir: str | None, size: int, classes: int, images: int):
    """(dataset, number of classes): an ImageNet-style folder DIR/train/<class>/<image>
    with the standard training augmentation, or FakeData of the same shape."""
    normalize = transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)
    if data_dir is None:
        to_tensor = transforms.Compose([transforms.ToTensor(), normalize])
        return datasets.FakeData(images, (3, size, size), classes, transform=to_tensor), classes
    augment = transforms.Compose([
        transforms.RandomResizedCrop(size),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        normalize,
    ])  # fmt: skip
    folder = datasets.ImageFolder(os.path.join(data_dir, "train"), transform=augment)
    return folder, len(folder.classes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a few steps")
    parser.add_argument("--arch", default="resnet50", help="a torchvision.models name")
    parser.add_argument("--data-dir", help="an ImageNet-style folder; default: FakeData")
    parser.add_argument("--save", help="write the run report to this JSON file")
    args = parser.parse_args()
    # Per-GPU batch, image side, classes, FakeData images, loader workers, steps.
    batch, size, classes, images, workers, steps = 256, 224, 1000, 25_600, 8, 300
    if args.smoke:
        args.arch, batch, size, classes, images, workers, steps = "resnet18", 8, 64, 10, 64, 0, 6

    plan = accelkit.auto_configure()
    print(f"{args.arch}, batch {batch} at {size}x{size}, precision {plan.precision.value}")
    dataset, classes = make_dataset(args.data_dir, size, classes, images)
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=batch,
        shuffle=True,
        num_workers=workers,
        pin_memory=torch.cuda.is_available(),
        persistent_workers=workers > 0,
        drop_last=True,
    )
    model = torchvision.models.get_model(args.arch, weights=None, num_classes=classes)
    # lr 0.1 per 256 images (Goyal et al. 2017); weight decay on the conv and linear
    # weights only, not on biases and BatchNorm (He et al. 2019, "no bias decay").
    decay = [p for p in model.parameters() if p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.ndim <= 1]
    optimizer = torch.optim.SGD(
        [{"params": decay, "weight_decay": 1e-4}, {"params": no_decay, "weight_decay": 0.0}],
        lr=0.1 * batch / 256,
        momentum=0.9,
        nesterov=True,
    )
    report = accelkit.torch.fit(
        model,
        loader,
        optimizer,
        torch.nn.CrossEntropyLoss(label_smoothing=0.1),
        epochs=90,  # a bound: steps= ends the measured run first
        steps=steps,
        window=2 if args.smoke else 50,
    )
    print(report)
    if args.save:
        report.save(args.save)


if __name__ == "__main__":
    main()
