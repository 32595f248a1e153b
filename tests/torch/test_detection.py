"""Detection models as torchvision writes them, and the batches and arguments around them.

A batch ``(images, targets)``: a list of image tensors (sizes may differ) and one target
dict per image; a model that takes the list and returns a dict of losses in training
mode. `TinyDetector` has that interface on the CPU (torchvision does not import beside
the CPU torch here); the GPU test fits torchvision's own Faster R-CNN.
"""

from __future__ import annotations

import collections
import math
from typing import Any

import pytest

import accelkit

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from ..helpers.torch_data import CPU_PLAN


class TinyDetector(torch.nn.Module):
    """torchvision's detection interface: ``model(images, targets)`` -> a dict of losses in
    training mode (``loss_classifier``, ``loss_box_reg``), boxes in eval mode. Images are
    a list of (3, H, W) tensors of any size."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.backbone = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU())
        self.classes = torch.nn.Linear(8, 5)
        self.boxes = torch.nn.Linear(8, 4)

    def forward(self, images: list[Any], targets: list[dict[str, Any]] | None = None) -> Any:
        if not isinstance(images, list) or not all(i.dim() == 3 for i in images):
            raise TypeError("images must be a list of (3, H, W) tensors")
        features = torch.stack([self.backbone(i[None]).mean((0, 2, 3)) for i in images])
        if not self.training:
            return [{"boxes": b[None]} for b in self.boxes(features)]
        labels = torch.stack([t["labels"][0] for t in targets])
        boxes = torch.stack([t["boxes"][0] for t in targets])
        return {
            "loss_classifier": torch.nn.functional.cross_entropy(self.classes(features), labels),
            "loss_box_reg": torch.nn.functional.smooth_l1_loss(self.boxes(features), boxes),
        }


def detection_batches(n: int = 8, images: int = 2) -> list[tuple[list[Any], list[dict[str, Any]]]]:
    generator = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        sizes = [(32 + 8 * i, 40) for i in range(images)]  # images of different sizes
        out.append(
            (
                [torch.randn(3, h, w, generator=generator) for h, w in sizes],
                [
                    {
                        "boxes": torch.rand(1, 4, generator=generator),
                        "labels": torch.randint(0, 5, (1,)),
                    }
                    for _ in sizes
                ],
            )
        )
    return out


def fit(model: Any, data: Any, loss_fn: Any = None, **kwargs: Any) -> accelkit.RunReport:
    kwargs.setdefault("plan", CPU_PLAN)
    kwargs.setdefault("progress", False)
    kwargs.setdefault("tune", False)
    optimizer = kwargs.pop("optimizer", None) or torch.optim.SGD(model.parameters(), lr=0.01)
    return accelkit.torch.fit(model, data, optimizer, loss_fn, **kwargs)


def test_a_detection_model_trains_on_the_sum_of_its_losses_said_in_a_note() -> None:
    model = TinyDetector()
    before = [p.detach().clone() for p in model.parameters()]
    report = fit(model, detection_batches(8, images=3), warmup=2, window=2)
    assert report.steps == 8
    assert report.batch_size == 3  # images, not an image's 3 channels
    assert "loss_classifier, loss_box_reg" in report.notes["loss"]
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_a_detection_models_loss_is_the_sum_of_its_losses() -> None:
    model, (images, targets) = TinyDetector(), detection_batches(1)[0]
    from accelkit.profiling import torch_batches

    losses = model(images, targets)
    assert torch.equal(
        torch_batches.forward_loss(model, (images, targets), None),
        losses["loss_classifier"] + losses["loss_box_reg"],
    )


class Boxes(torch.nn.Module):
    """Takes the list of images, one box per image out: for a `loss_fn` of boxes."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)

    def forward(self, images: list[Any]) -> Any:
        assert isinstance(images, list), "the images come as one list"
        return [self.conv(i[None]).mean((2, 3)) for i in images]


def box_loss(outputs: list[Any], targets: list[dict[str, Any]]) -> Any:
    pairs = zip(outputs, targets, strict=True)
    return sum(torch.nn.functional.l1_loss(o, t["boxes"]) for o, t in pairs) / len(outputs)


@pytest.mark.parametrize("wrapped", [False, True])
def test_with_a_loss_fn_the_list_of_images_is_one_argument_counted_by_images(
    wrapped: bool,
) -> None:
    """``(images, targets)``, or the list as the one positional argument,
    ``((images,), targets)``: ``model(images)`` either way, two samples a batch."""
    batches = detection_batches(6)
    if wrapped:
        batches = [((images,), targets) for images, targets in batches]
    report = fit(Boxes(), batches, box_loss, warmup=2, window=2)
    assert report.steps == 6 and report.batch_size == 2


def test_a_namedtuple_batch_trains_as_a_tuple() -> None:
    Batch = collections.namedtuple("Batch", "x y")  # noqa: PYI024 - as scripts write them
    model = torch.nn.Linear(16, 4)
    data = [Batch(torch.randn(8, 16), torch.randint(0, 4, (8,))) for _ in range(5)]
    report = fit(model, data, torch.nn.CrossEntropyLoss())
    assert report.steps == 5 and report.batch_size == 8


def test_an_optimizer_that_needs_a_closure_is_refused_before_training() -> None:
    model = torch.nn.Linear(16, 4)
    before = model.weight.detach().clone()
    data = [(torch.randn(8, 16), torch.randint(0, 4, (8,)))] * 3
    with pytest.raises(ValueError, match="LBFGS needs a closure"):
        fit(
            model,
            data,
            torch.nn.CrossEntropyLoss(),
            optimizer=torch.optim.LBFGS(model.parameters()),
        )
    assert torch.equal(model.weight, before)


@pytest.mark.parametrize(
    ("device", "says"),
    [
        ("bogus", "cannot be used"),
        ("meta", "hold no data"),
        ("cuda:99", "cuda"),
        (-1, "cannot be used"),
    ],
)
def test_a_device_that_cannot_train_is_refused_naming_the_valid_ones(
    device: Any, says: str
) -> None:
    model = torch.nn.Linear(16, 4)
    data = [(torch.randn(8, 16), torch.randint(0, 4, (8,)))] * 3
    with pytest.raises(ValueError, match=f"device=.*{says}") as raised:
        fit(model, data, torch.nn.CrossEntropyLoss(), device=device)
    assert "'cpu'" in str(raised.value) or "indexed from 0" in str(raised.value)
    assert next(model.parameters()).device.type == "cpu"


@pytest.mark.gpu
def test_torchvisions_faster_rcnn_fits_as_torchvision_writes_it() -> None:
    """fasterrcnn_mobilenet_v3_large_fpn, no weights, synthetic images and boxes, through
    ``fit`` with ``loss_fn=None``: the dict of its four losses summed, samples counted by
    images."""
    detection = pytest.importorskip("torchvision.models.detection")
    plan = accelkit.auto_configure(framework="torch", verbose=False)
    torch.manual_seed(0)
    model = detection.fasterrcnn_mobilenet_v3_large_fpn(
        weights=None, weights_backbone=None, num_classes=5
    )
    data = []
    for _ in range(12):
        boxes = torch.tensor([[10.0, 20.0, 120.0, 160.0], [50.0, 40.0, 200.0, 220.0]])
        targets = [{"boxes": boxes, "labels": torch.tensor([1, 3])} for _ in range(4)]
        data.append(([torch.rand(3, 256, 320) for _ in range(4)], targets))
    data = [
        ([i.cuda() for i in images], [{k: v.cuda() for k, v in t.items()} for t in targets])
        for images, targets in data
    ]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.005, momentum=0.9)
    report = accelkit.torch.fit(
        model, data, optimizer, None, plan=plan, progress=False, warmup=2, window=4
    )
    assert report.steps == 12 and report.batch_size == 4
    assert "loss_classifier" in report.notes["loss"]
    assert all(math.isfinite(loss) for loss in report.losses)
