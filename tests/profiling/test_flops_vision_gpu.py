"""FLOPs of one training step of the vision models people train from timm and
torchvision (ResNet-50, ViT-B/16, ConvNeXt-T at 224x224), against analytic counts
walked by hand from their published architectures.

The counts are GPU tests: PyPI's torchvision is a CUDA build and timm needs it, so they
run on the GPU machines (where both are installed) and skip elsewhere with the reason;
the hand-walked counts are checked against the published ones everywhere.

Each analytic count lists the multiply-adds (MACs) of the convolutions and linear
layers of one forward pass per image (a multiply-add is 2 FLOPs); normalisation,
activations, pooling and the loss are left out, as in the counter's convention. A
training step is forward + backward = 3x the forward, except that the first layer's
input is the data, which needs no gradient: its backward computes only its weight
gradient, so it costs 2x (PaLM appendix B; `accelkit.profiling.flops_torch`).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from accelkit.profiling.flops_torch import count_train_step_flops

pytestmark = pytest.mark.torch

BATCH, SIDE, CLASSES = 2, 224, 1000


def _conv(cin: int, cout: int, kernel: int, out_side: int, groups: int = 1) -> int:
    """MACs of one image through a 2-D convolution with a square kernel and output."""
    return cin // groups * cout * kernel * kernel * out_side * out_side


def resnet50_macs() -> tuple[int, int]:
    """(all MACs, the stem's) of ResNet-50 v1.5 (torchvision's, He et al. 2016 with the
    stride on the 3x3 convolution): 4.09 G, the "4.1 GMACs" torchvision publishes."""
    stem = _conv(3, 64, 7, SIDE // 2)  # 7x7/2 -> 112; then the 3x3/2 max pool -> 56
    side, cin, macs = SIDE // 4, 64, stem
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for block in range(blocks):
            out = side // (stride if block == 0 else 1)
            macs += _conv(cin, width, 1, side)  # 1x1 reduce, at the block's input size
            macs += _conv(width, width, 3, out)  # 3x3, strided in the first block
            macs += _conv(width, 4 * width, 1, out)  # 1x1 expand
            if block == 0:
                macs += _conv(cin, 4 * width, 1, out)  # the projection shortcut
            cin, side = 4 * width, out
    return macs + cin * CLASSES, stem  # global average pool, then fc 2048 -> 1000


def vit_b16_macs() -> tuple[int, int]:
    """(all MACs, the patch embedding's) of ViT-B/16 (Dosovitskiy et al. 2021): 196
    patches + the class token, width 768, 12 layers, MLP 3072, the head on the class
    token; attention QKᵀ and AV over the full 197 x 197 scores: 17.6 G, as timm lists."""
    patches, dim, layers, mlp = (SIDE // 16) ** 2, 768, 12, 3072
    tokens = patches + 1
    embed = _conv(3, dim, 16, SIDE // 16)
    per_layer = tokens * (4 * dim * dim + 2 * dim * mlp) + 2 * tokens * tokens * dim
    return embed + layers * per_layer + dim * CLASSES, embed


def convnext_tiny_macs() -> tuple[int, int]:
    """(all MACs, the stem's) of ConvNeXt-T (Liu et al. 2022): a 4x4/4 stem, stages of
    3, 3, 9, 3 blocks at widths 96..768 (7x7 depthwise conv, then 1x1 C -> 4C -> C as
    linear layers), 2x2/2 downsampling between stages: 4.46 G (timm lists 4.47)."""
    stem = _conv(3, 96, 4, SIDE // 4)
    side, macs = SIDE // 4, stem
    widths, depths = (96, 192, 384, 768), (3, 3, 9, 3)
    for stage, (width, depth) in enumerate(zip(widths, depths, strict=True)):
        if stage:
            side //= 2
            macs += _conv(widths[stage - 1], width, 2, side)
        block = _conv(width, width, 7, side, groups=width) + 2 * width * 4 * width * side * side
        macs += depth * block
    return macs + widths[-1] * CLASSES, stem


def count(model):
    """One training step of `model` on a batch of random images and labels, on the GPU."""
    device = torch.device("cuda")
    model = model.to(device)
    images = torch.randn(BATCH, 3, SIDE, SIDE, device=device)
    labels = torch.randint(0, CLASSES, (BATCH,), device=device)
    return count_train_step_flops(model, images, labels, torch.nn.functional.cross_entropy)


def step_flops(macs: tuple[int, int]) -> int:
    total, first = macs
    return BATCH * (2 * 3 * total - 2 * first)


def test_the_hand_walked_counts_match_the_published_ones():
    assert resnet50_macs()[0] == pytest.approx(4.09e9, rel=0.01)
    assert vit_b16_macs()[0] == pytest.approx(17.6e9, rel=0.01)
    assert convnext_tiny_macs()[0] == pytest.approx(4.47e9, rel=0.01)


@pytest.mark.gpu
def test_torchvision_resnet50_within_2_percent_of_the_analytic_count():
    torchvision = pytest.importorskip("torchvision")
    result = count(torchvision.models.resnet50())
    assert result.forward == pytest.approx(2 * BATCH * resnet50_macs()[0], rel=0.02)
    assert result.total == pytest.approx(step_flops(resnet50_macs()), rel=0.02)


@pytest.mark.gpu
def test_torchvision_vit_b16_within_2_percent_of_the_analytic_count():
    torchvision = pytest.importorskip("torchvision")
    result = count(torchvision.models.vit_b_16())
    assert result.total == pytest.approx(step_flops(vit_b16_macs()), rel=0.02)
    assert any("attention" in op for op in result.by_op), "SDPA must be counted"


@pytest.mark.gpu
def test_timm_vit_base_patch16_224_within_2_percent_of_the_analytic_count():
    timm = pytest.importorskip("timm")
    result = count(timm.create_model("vit_base_patch16_224", pretrained=False))
    assert result.total == pytest.approx(step_flops(vit_b16_macs()), rel=0.02)


@pytest.mark.gpu
def test_timm_convnext_tiny_within_2_percent_of_the_analytic_count():
    timm = pytest.importorskip("timm")
    result = count(timm.create_model("convnext_tiny", pretrained=False))
    assert result.total == pytest.approx(step_flops(convnext_tiny_macs()), rel=0.02)
