"""What a model's training state takes in device memory: bytes per parameter by
optimizer and precision, activations, and what one GPU holds under each layout.

Pure arithmetic on counts; `accelkit.planning.sharding` chooses the layout from it.

The weights accelkit trains are float32 under every plan: PyTorch's autocast runs
matmuls in bf16/fp16 on the fly but leaves the parameters, their gradients and the
optimizer's state in float32 (PyTorch AMP docs: "autocast ... ops run in lower
precision, the model's parameters stay in float32"), and Keras's mixed policies keep
float32 variables (TensorFlow mixed-precision guide). So mixed precision with AdamW is
4 (weights) + 4 (gradients) + 8 (m and v) = 16 bytes per trainable parameter: the
ZeRO paper's figure (Rajbhandari et al. 2020, section 3.1: 2 + 2 + 12 = 16 for fp16
weights and gradients plus fp32 master weights, m and v), laid out differently.
FSDP2 with ``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)`` keeps
the same float32 state, sharded (16/N per GPU), and gathers bf16 copies of one unit
(a transformer block) at a time for compute (PyTorch FSDP2 docs, ``fully_shard``).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping

from accelkit.planning.types import Framework, FrozenDtype, Optimizer, Precision

GB = 1e9  # memory figures are decimal GB, as the datasheets give device memory

WEIGHT_BYTES = 4  # float32 parameters under every accelkit plan (see the module docstring)
GRADIENT_BYTES = 4  # .grad has the parameter's dtype (PyTorch autograd; tf.GradientTape)

OPTIMIZER_BYTES: Mapping[Optimizer, float] = {
    # m and v in float32 (torch.optim.AdamW / Adam; ZeRO section 3.1 counts them in K=12)
    Optimizer.ADAMW: 8,
    Optimizer.ADAM: 8,
    # m and v in 8 bits, block-wise quantisation statistics negligible (Dettmers et al.
    # 2022, "8-bit Optimizers via Block-wise Quantization"; bitsandbytes AdamW8bit)
    Optimizer.ADAMW_8BIT: 2,
    # a factored second moment (rows + columns of each matrix, not rows x columns) and
    # no first moment by default (Shazeer & Stern 2018; transformers' Adafactor beta1=None)
    Optimizer.ADAFACTOR: 0,
    # one float32 momentum buffer (torch.optim.SGD, momentum > 0)
    Optimizer.SGD_MOMENTUM: 4,
    Optimizer.SGD: 0,
}

# Temporaries of one optimizer step, per trainable parameter: PyTorch's default
# multi-tensor ("foreach") Adam allocates sqrt(v) for every parameter at once
# (torch/optim/adamw.py, _multi_tensor_adamw: torch._foreach_sqrt); fused=True and the
# 8-bit kernels update in place; SGD's foreach update is in place without weight decay.
# Keras optimizers update one variable at a time (no step-wide temporaries).
FOREACH_STEP_BYTES: Mapping[Optimizer, float] = {Optimizer.ADAMW: 4, Optimizer.ADAM: 4}

# Bytes per frozen parameter, stored once in its dtype (no float32 master copy, no
# gradient, no optimizer state: the optimizer never sees it).
FROZEN_BYTES: Mapping[FrozenDtype, float] = {
    FrozenDtype.FP32: 4,
    FrozenDtype.BF16: 2,
    FrozenDtype.FP16: 2,
    # LLM.int8() (Dettmers et al. 2022, "LLM.int8(): 8-bit Matrix Multiplication for
    # Transformers at Scale"; bitsandbytes Linear8bitLt): one int8 byte per weight plus a
    # float32 scale per row (SCB), 4/h bytes per weight: 0.001 B at h = 4096, not counted.
    FrozenDtype.INT8: 1,
    # QLoRA's NF4 (Dettmers et al. 2023, "QLoRA", section 3, Double Quantization): 4 bits
    # per weight plus the quantisation constants, 0.127 bits per weight when they are
    # double-quantised (an 8-bit constant per block of 64, a float32 per 256 constants:
    # 8/64 + 32/(64 x 256)). Counted: 0.5 + 0.127/8 = 0.516 B (without double
    # quantisation, bitsandbytes' default, the constants take 0.5 bits: 0.5625 B).
    FrozenDtype.INT4: 0.5 + 0.127 / 8,
}

# A 16-bit copy of each weight, made by autocast (cached for leaf tensors that require
# grad: torch/csrc/autograd/autocast_mode.cpp, cached_cast) or by Keras's
# AutoCastVariable, and kept for the backward pass.
CAST_BYTES = 2

# FSDP2 per GPU holds, besides its shard: the unit it computes (bf16 params, 2 bytes),
# the next unit prefetched (2), the unit's unsharded bf16 gradients (2) and their
# float32 copy for the reduce-scatter in reduce_dtype=float32 (4): 10 bytes x unit.
FSDP_UNIT_BYTES = 10

# Headroom: the caching allocator's fragmentation and rounding take a share of the
# device (PyTorch's CUDA memory docs; expandable_segments lowers it), and the CUDA
# context, cuBLAS workspaces and NCCL's buffers a fixed amount before any tensor
# (about 0.3-0.6 GB of context with lazy module loading, NCCL a few hundred MB).
HEADROOM = 0.10
RESERVED_BYTES = int(1 * GB)

# Activations not yet measured: a layout is preferred when it leaves them this share of
# the usable memory. A transformer block keeps 34·s·b·h bytes of 16-bit activations
# when the attention scores are not stored (Korthikanti et al. 2022, section 4, less
# the 5·a·s²·b term that flash attention does not keep): Llama 3 8B (h 4096, 32 blocks)
# at one 2048-token sequence holds 34 x 2048 x 4096 x 32 = 9.1 GB, plus 1.0 GB of
# float32 logits (2048 x 128,256 x 4 B): 10.1 GB, 14% of an H100's 71.1 GB usable.
# 20% keeps that micro-batch with margin; a smaller share would plan layouts that run
# out of memory at the first step of the smallest micro-batch such runs use.
ACTIVATION_SHARE = 0.20


def activation_reserve(usable: int) -> int:
    """Bytes a layout should leave for activations not yet measured
    (`ACTIVATION_SHARE` of `usable`).

    Example:
        >>> activation_reserve(usable_bytes(80_000_000_000)) / 1e9
        14.22
    """
    return int(usable * ACTIVATION_SHARE)


# Blocks (transformer layers) of models of known size, for the size of one FSDP unit
# and of one recomputed block when the model itself is not at hand: GPT-2 small (124M,
# 12 layers), Llama 3.2 1B (1.24B, 16), Llama 3 8B (8.03B, 32), 70B (70.6B, 80),
# 405B (406B, 126) (the GPT-2 paper; The Llama 3 Herd of Models, 2024, table 3).
_BLOCKS = ((0.124e9, 12), (1.24e9, 16), (8.03e9, 32), (70.6e9, 80), (406e9, 126))

# Activations kept with full recomputation of each block: its 2-byte input, 2sbh, out
# of sbh(34 + 5as/h) without (Korthikanti et al. 2022, "Reducing Activation
# Recomputation in Large Transformer Models", section 4): at most 1/17; plus the one
# block recomputed during the backward pass.
_CHECKPOINTED_SHARE = 1 / 17


@dataclasses.dataclass(frozen=True)
class PerParam:
    """Bytes per parameter that a training step keeps or makes.

    Attributes:
        weights, gradients, optimizer: kept per trainable parameter (the state).
        frozen: kept per frozen parameter (its weight only, in its dtype: no gradient,
            no state; `FROZEN_BYTES`).
        casts: 16-bit copies of the trainable weights made for the forward pass (0 in
            fp32/tf32).
        frozen_casts: the same of the frozen weights: none of weights already in the
            compute dtype, nor of quantised ones (bitsandbytes dequantises one layer at a
            time inside its matmul, forward and backward, and keeps none).
        step: temporaries of the optimizer step (foreach implementations).
    """

    weights: float
    gradients: float
    optimizer: float
    frozen: float
    casts: float
    frozen_casts: float
    step: float

    @property
    def state(self) -> float:
        """Weights + gradients + optimizer state (+ master weights: the weights here)."""
        return self.weights + self.gradients + self.optimizer


def per_param(
    optimizer: Optimizer,
    precision: Precision,
    framework: Framework,
    frozen: FrozenDtype = FrozenDtype.FP32,
) -> PerParam:
    """The bytes per parameter of `optimizer` under `precision`, the frozen parameters
    held in `frozen` (see the module docstring and `FROZEN_BYTES`).

    Example:
        >>> per_param(Optimizer.ADAMW, Precision.BF16, Framework.TORCH).state
        16
        >>> sizes = per_param(Optimizer.ADAMW, Precision.BF16, Framework.TORCH, FrozenDtype.BF16)
        >>> sizes.frozen, sizes.frozen_casts
        (2, 0)
    """
    # fp8 counts as bf16: torchao keeps fp32 weights and casts each layer's weights to
    # float8 as it runs, a transient smaller than the 16-bit casts counted.
    compute = precision.without_float8
    mixed = compute in (Precision.BF16, Precision.FP16)
    foreach = framework is Framework.TORCH
    # autocast casts a floating-point weight not in its dtype (fp32, or bf16 under fp16)
    cast_frozen = (
        mixed and frozen.value in ("fp32", "bf16", "fp16") and frozen.value != compute.value
    )
    return PerParam(
        weights=WEIGHT_BYTES,
        gradients=GRADIENT_BYTES,
        optimizer=OPTIMIZER_BYTES[optimizer],
        frozen=FROZEN_BYTES[frozen],
        casts=CAST_BYTES if mixed else 0,
        step=FOREACH_STEP_BYTES.get(optimizer, 0) if foreach else 0,
        frozen_casts=CAST_BYTES if cast_frozen else 0,
    )


def blocks(params: int) -> int:
    """The blocks a model of `params` parameters has, interpolated (in log-log) between
    models of known size (`_BLOCKS`), for when the model is not at hand.

    Example:
        >>> blocks(8_030_000_000), blocks(70_600_000_000)
        (32, 80)
    """
    (p0, b0), *_ = _BLOCKS
    if params <= p0:
        return b0
    for (lo, b_lo), (hi, b_hi) in itertools.pairwise(_BLOCKS):
        if params <= hi:
            share = math.log(params / lo) / math.log(hi / lo)
            return round(b_lo * (b_hi / b_lo) ** share)
    return _BLOCKS[-1][1]


def checkpointed(activation_bytes: int, params: int) -> int:
    """Activations left with every block checkpointed: each block's input, and one
    block's activations while it is recomputed (`_CHECKPOINTED_SHARE`, Korthikanti et
    al. 2022).

    Example:
        >>> checkpointed(17_000_000_000, 8_030_000_000)
        1531250000
    """
    return math.ceil(activation_bytes * (_CHECKPOINTED_SHARE + 1 / blocks(params)))


def usable_bytes(device_bytes: int) -> int:
    """What tensors can use of a device of `device_bytes`: less the CUDA context's
    share (`RESERVED_BYTES`) and the allocator's (`HEADROOM`).

    Example:
        >>> usable_bytes(80_000_000_000) / 1e9
        71.1
    """
    return max(0, int((device_bytes - RESERVED_BYTES) * (1 - HEADROOM)))


@dataclasses.dataclass(frozen=True)
class Layout:
    """How the state is spread: over `shards` GPUs (1: whole on each, DDP or one GPU),
    with blocks recomputed (`checkpointing`) or the state in host memory (`offload`)."""

    shards: int = 1
    checkpointing: bool = False
    offload: bool = False

    @property
    def name(self) -> str:
        """The `MemoryEstimate.choice` this layout gives on `gpus` GPUs (without them)."""
        extras = "".join(
            f"+{name}"
            for name, on in (("offload", self.offload), ("checkpointing", self.checkpointing))
            if on
        )
        return f"fsdp2{extras}" if self.sharded else f"replicated{extras}"

    @property
    def sharded(self) -> bool:
        return self.shards > 1 or self.offload


@dataclasses.dataclass(frozen=True)
class Footprint:
    """What one GPU holds under a layout, in bytes: its share of the state, and the
    larger of the two phases of a step, which do not overlap: forward and backward
    (casts or gathered FSDP units, and the activations) and the optimizer step (its
    temporaries)."""

    state: int  # its share of weights, gradients and optimizer state
    compute: int  # 16-bit weight casts, or FSDP2's gathered units
    activations: int  # as given (checkpointed when the layout recomputes); 0 if unknown
    step: int  # the optimizer step's temporaries

    @property
    def total(self) -> int:
        return self.state + max(self.compute + self.activations, self.step)

    @property
    def transient(self) -> int:
        """What the peak holds beyond the state and the activations."""
        return self.total - self.state - self.activations


def footprint(
    layout: Layout, sizes: PerParam, params: int, trainable: int, activations: int | None
) -> Footprint:
    """What one GPU holds under `layout` (`Footprint`).

    Example:
        >>> sizes = per_param(Optimizer.ADAMW, Precision.BF16, Framework.TORCH)
        >>> footprint(Layout(), sizes, 10**9, 10**9, None).total / 1e9
        20.0
    """
    frozen = params - trainable
    state = trainable * sizes.state + frozen * sizes.frozen
    kept = 0 if activations is None else activations
    if layout.checkpointing and activations is not None:
        kept = checkpointed(activations, params)
    if not layout.sharded:
        casts = trainable * sizes.casts + frozen * sizes.frozen_casts
        return Footprint(int(state), int(casts), kept, int(trainable * sizes.step))
    unit = FSDP_UNIT_BYTES * params / blocks(params)
    # offload: the state, and the optimizer step, live in host memory
    own, step = (0.0, 0.0) if layout.offload else (state, trainable * sizes.step)
    return Footprint(
        math.ceil(own / layout.shards), math.ceil(unit), kept, math.ceil(step / layout.shards)
    )


def activations_from_rise(
    rise: int,
    gradient_bytes: int,
    layout: Layout,
    sizes: PerParam,
    params: int,
    trainable: int | None = None,
) -> int:
    """The activations of a measured forward and backward pass: `rise`, the device
    memory's peak during the pass beyond what was allocated before it, less the
    gradients the pass made (`gradient_bytes`) and the transients `footprint` counts
    apart (its ``compute``: autocast's weight copies, or FSDP2's gathered units), so that
    `footprint` given them adds up to the pass measured (0 when the rise is smaller).
    `trainable`: the parameters that get gradients (default: all), for the casts of the
    frozen ones, which may differ.

    Example:
        >>> sizes = per_param(Optimizer.ADAMW, Precision.BF16, Framework.TORCH)
        >>> activations_from_rise(10_000, 4_000, Layout(), sizes, 1_000)   # 10k - 4k - 2 x 1k
        4000
    """
    compute = footprint(layout, sizes, params, params if trainable is None else trainable, None)
    return max(0, rise - gradient_bytes - compute.compute)
