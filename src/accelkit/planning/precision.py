"""Precision decisions: the compute dtype, TF32, fp32 output heads, loss scaling."""

from __future__ import annotations

from accelkit.hardware import capabilities
from accelkit.hardware.capabilities import BF16_TF32
from accelkit.hardware.capabilities import format_capability as _fmt
from accelkit.hardware.info import HardwareInfo
from accelkit.planning.keys import Key
from accelkit.planning.types import Framework, Precision, Request, Setting


def _cc(hardware: HardwareInfo) -> tuple[int, int] | None:
    return hardware.min_compute_capability


def _gpu_label(hardware: HardwareInfo) -> str:
    # The GPU that limits the plan: the lowest compute capability, and among equals one
    # without tensor cores (a GTX 1660 beside an RTX 2080, both 7.5).
    gpu = min(
        hardware.gpus,
        key=lambda g: (
            g.compute_capability or (0, 0),
            capabilities.has_tensor_cores(g.compute_capability, g.name),
        ),
    )
    return f"{gpu.name} (compute capability {_fmt(gpu.compute_capability or (0, 0))})"


def _no_tensor_cores(label: str) -> str:
    return f"{label}: no tensor cores, mixed precision gives no speed-up"


def validate(hardware: HardwareInfo, precision: Precision) -> None:
    """Raise `ValueError` when an explicitly requested precision cannot run on these GPUs.

    bf16 and TF32 need compute capability >= 8.0; on older GPUs they are
    emulated or absent (`torch.cuda.is_bf16_supported()` says True on a T4, yet
    bf16 matmuls there run without tensor cores).
    """
    cc = _cc(hardware)
    if cc is None or precision not in (Precision.BF16, Precision.TF32):
        return
    if not capabilities.has_bf16(cc):
        raise ValueError(
            f"precision={precision.value!r} needs compute capability >= {_fmt(BF16_TF32)}; "
            f"{_gpu_label(hardware)} has {_fmt(cc)}. Use 'fp16' (mixed, with loss scaling) "
            "or 'fp32'."
        )


def choose(hardware: HardwareInfo, request: Request) -> tuple[Precision, str]:
    """The precision to run in and the one-line reason for it."""
    if request.precision is not Precision.AUTO:
        validate(hardware, request.precision)
        return request.precision, f"requested precision={request.precision.value!r}"
    cc = _cc(hardware)
    if cc is None:
        if hardware.gpus:
            return Precision.FP32, "GPU compute capability unknown: fp32 is the safe choice"
        return Precision.FP32, "no NVIDIA GPU detected: fp32 on the CPU"
    label = _gpu_label(hardware)
    tensor_cores = capabilities.all_have_tensor_cores(hardware.gpus)
    if request.framework is Framework.TENSORFLOW:
        return _keras(label, cc, tensor_cores)
    if capabilities.has_bf16(cc):
        return Precision.BF16, (
            f"{label}: bf16 tensor cores; bf16 keeps fp32's exponent range, "
            "so no loss scaling is needed"
        )
    if tensor_cores:
        return Precision.FP16, (
            f"{label}: fp16 tensor cores but no native bf16; fp16 mixed with dynamic loss scaling"
        )
    return Precision.FP32, _no_tensor_cores(label)


def _keras(label: str, cc: tuple[int, int], tensor_cores: bool) -> tuple[Precision, str]:
    """Keras's policy by generation: bf16 where the GPU has it (measured against fp16 on an
    H200, Keras on JAX, docs/benchmarks.md "Keras: mixed_bfloat16 or mixed_float16"),
    fp16 with loss scaling on Volta/Turing, fp32 without tensor cores."""
    if capabilities.has_bf16(cc):
        return Precision.BF16, (
            f"{label}: bf16 tensor cores; mixed_bfloat16 keeps float32's range, so no loss "
            "scaling (a custom train_step needs no scale_loss) and no float16 overflow; "
            "H200 (Keras/JAX): ResNet-50 5% slower, a GPT decoder 2% faster than mixed_float16"
        )
    if tensor_cores:
        return Precision.FP16, (
            f"{label}: fp16 tensor cores but no native bf16; mixed_float16 with dynamic loss "
            "scaling (Keras's LossScaleOptimizer; a custom train_step must call "
            "self.optimizer.scale_loss, which accelkit's ProfileCallback makes up for)"
        )
    return Precision.FP32, _no_tensor_cores(label)


def settings(
    hardware: HardwareInfo, request: Request, precision: Precision, reason: str
) -> list[Setting]:
    if request.framework is Framework.TENSORFLOW:
        return _tensorflow(hardware, precision, reason)
    return _torch(hardware, precision, reason)


def _tf32_allowed(hardware: HardwareInfo, precision: Precision) -> bool | None:
    """True/False when the GPUs have TF32 and the precision decides it; None without TF32."""
    if not capabilities.has_tf32(_cc(hardware)):
        return None
    return precision is not Precision.FP32


def _tf32_reason(allowed: bool) -> str:
    if allowed:
        return (
            "fp32 matmuls/convolutions that remain run on tensor cores with a 10-bit "
            "mantissa (TF32): up to 8x the fp32 rate, accuracy fine for training"
        )
    return "precision='fp32' asks for IEEE fp32: TF32 off for matmuls and convolutions"


def _torch(hardware: HardwareInfo, precision: Precision, reason: str) -> list[Setting]:
    out = [Setting(Key.PRECISION, precision.value, reason)]
    dtype = capabilities.torch_dtype_name(precision)
    if dtype is not None:
        out.append(
            Setting(
                Key.AUTOCAST_DTYPE,
                dtype,
                "matmuls and convolutions in 16 bits under torch.autocast (plan.autocast(), "
                "accelkit.torch.fit); weights and optimizer state stay fp32",
            )
        )
        out.append(
            Setting(
                Key.OUTPUTS_FLOAT32,
                True,
                "the loss runs under autocast, which computes softmax, log-softmax and losses in "
                "float32 from 16-bit outputs inside the kernel (16-bit losses lose precision; a "
                "separate .float() pass costs 8% of a GPT-2 step on an H200)",
            )
        )
    if precision is Precision.FP16:
        out.append(
            Setting(
                Key.GRAD_SCALER,
                True,
                "fp16 gradients underflow without loss scaling: torch.amp.GradScaler "
                "(plan.grad_scaler())",
            )
        )
    tf32 = _tf32_allowed(hardware, precision)
    if tf32 is not None:
        out.append(Setting(Key.TORCH_TF32_MATMUL, tf32, _tf32_reason(tf32)))
        out.append(Setting(Key.TORCH_TF32_CUDNN, tf32, _tf32_reason(tf32)))
    return out


def _tensorflow(hardware: HardwareInfo, precision: Precision, reason: str) -> list[Setting]:
    out = [Setting(Key.KERAS_POLICY, capabilities.keras_policy(precision), reason)]
    if capabilities.is_mixed(precision):
        out.append(
            Setting(
                Key.KERAS_FLOAT32_HEAD,
                True,
                "the output layer (and its softmax) stays float32 under a mixed policy: "
                "accelkit.keras.float32_head(model)",
            )
        )
    if precision is Precision.FP16:
        out.append(
            Setting(
                Key.KERAS_LOSS_SCALE,
                "dynamic",
                "fp16 gradients underflow without loss scaling: Keras wraps the optimizer in "
                "LossScaleOptimizer at compile() under mixed_float16; a custom train_step "
                "scales its loss with self.optimizer.scale_loss(loss)",
            )
        )
    tf32 = _tf32_allowed(hardware, precision)
    if tf32 is not None:
        out.append(Setting(Key.TF_TF32, tf32, _tf32_reason(tf32)))
    return out
