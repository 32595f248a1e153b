"""Precision decisions: the compute dtype, TF32, fp32 output heads, loss scaling."""

from __future__ import annotations

from accelkit.hardware import capabilities
from accelkit.hardware.capabilities import BF16_TF32, FP8
from accelkit.hardware.capabilities import format_capability as _fmt
from accelkit.hardware.info import GpuInfo, HardwareInfo
from accelkit.planning.keys import Float8, Key
from accelkit.planning.types import Framework, Precision, Request, Setting

# Where float8 matmuls run, in the words of every message that says so.
FLOAT8_NEEDS = f"compute capability >= {_fmt(FP8)} (float8 tensor cores: Ada, Hopper, Blackwell)"


def _cc(hardware: HardwareInfo) -> tuple[int, int] | None:
    return hardware.min_compute_capability


def _limiting_gpu(hardware: HardwareInfo) -> GpuInfo:
    # The GPU that limits the plan: the lowest compute capability, and among equals one
    # without tensor cores (a GTX 1660 beside an RTX 2080, both 7.5).
    return min(
        hardware.gpus,
        key=lambda g: (
            g.compute_capability or (0, 0),
            capabilities.has_tensor_cores(g.compute_capability, g.name),
        ),
    )


def _gpu_label(hardware: HardwareInfo) -> str:
    gpu = _limiting_gpu(hardware)
    return f"{gpu.name} (compute capability {_fmt(gpu.compute_capability or (0, 0))})"


def _no_tensor_cores(label: str) -> str:
    return f"{label}: no tensor cores, mixed precision gives no speed-up"


def validate(hardware: HardwareInfo, precision: Precision) -> None:
    """Raise `ValueError` when an explicitly requested precision cannot run on these GPUs.

    bf16 and TF32 need compute capability >= 8.0; on older GPUs they are
    emulated or absent (`torch.cuda.is_bf16_supported()` says True on a T4, yet
    bf16 matmuls there run without tensor cores).
    """
    if precision is Precision.FP8:
        _validate_fp8(hardware)
        return
    cc = _cc(hardware)
    if cc is None or precision not in (Precision.BF16, Precision.TF32):
        return
    if not capabilities.has_bf16(cc):
        raise ValueError(
            f"precision={precision.value!r} needs compute capability >= {_fmt(BF16_TF32)}; "
            f"{_gpu_label(hardware)} has {_fmt(cc)}. Use 'fp16' (mixed, with loss scaling) "
            "or 'fp32'."
        )


def _validate_fp8(hardware: HardwareInfo) -> None:
    """fp8 needs float8 tensor cores on every GPU; refused on the CPU, and where the
    compute capability is unknown (a float8 matmul there fails inside the step)."""
    needed = f"precision='fp8' needs {FLOAT8_NEEDS}"
    if not hardware.gpus:
        why = hardware.gpus_unusable or "no NVIDIA GPU detected"
        raise ValueError(f"{needed}; this machine has none usable ({why}). Use 'auto'.")
    cc = _cc(hardware)
    if cc is None:
        raise ValueError(
            f"{needed}; the compute capability of {_limiting_gpu(hardware).name} is "
            "unknown. Use 'auto'."
        )
    if capabilities.has_fp8(cc):
        return
    if capabilities.has_bf16(cc):
        instead = f"'bf16' (on {_fmt(FP8)} and later, tune tries float8 where it pays)"
    elif capabilities.all_have_tensor_cores(hardware.gpus):
        instead = "'fp16' (mixed, with loss scaling)"
    else:
        instead = "'fp32' (no tensor cores)"
    raise ValueError(f"{needed}; {_limiting_gpu(hardware).name} has {_fmt(cc)}. Use {instead}.")


def choose(hardware: HardwareInfo, request: Request) -> tuple[Precision, str]:
    """The precision to run in and the one-line reason for it."""
    if request.precision is Precision.FP8 and request.framework is Framework.TENSORFLOW:
        raise ValueError(
            "precision='fp8' is for PyTorch (float8 matmuls through torchao); for Keras, "
            "plan 'bf16': Keras's own model.quantize('float8') ran no float8 matmul and "
            "trained 6% slower on an H200 (Keras 3.15 on JAX, docs/keras.md section 7)"
        )
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


def _float8(hardware: HardwareInfo, precision: Precision) -> Setting | None:
    """Whether the run's linear layers may run their matmuls in float8 (torchao): tried
    by tune on float8 tensor cores under bf16, every eligible layer under fp8, off with
    the reason elsewhere on a GPU; no setting without a GPU of known capability."""
    cc = _cc(hardware)
    if cc is None:
        return None
    label = _gpu_label(hardware)
    if not capabilities.has_fp8(cc):
        return Setting(
            Key.FLOAT8, Float8.OFF, f"{label}: no float8 matmuls; they need {FLOAT8_NEEDS}"
        )
    if precision is Precision.FP8:
        return Setting(
            Key.FLOAT8,
            Float8.ON,
            "precision='fp8': every eligible linear layer (dimensions multiples of 16) runs "
            "its matmuls in float8 (torchao) inside bf16 autocast, small ones too, which run "
            "slower in float8 (precision 'bf16' with tune keeps it only where measured faster)",
        )
    if precision is Precision.BF16:
        return Setting(
            Key.FLOAT8,
            Float8.TRIED,
            f"{label}: float8 tensor cores; tune tries float8 matmuls (torchao) on the "
            "linear layers large enough to gain, keeps them only where measured faster and "
            "checked against the bf16 step (small layers run slower in float8)",
        )
    return Setting(
        Key.FLOAT8,
        Float8.OFF,
        f"precision={precision.value!r}: float8 matmuls run inside bf16 autocast; with "
        "precision 'bf16' or 'auto' tune tries them",
    )


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
    dtype = capabilities.torch_dtype_name(precision.without_float8)
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
    float8 = _float8(hardware, precision)
    if float8 is not None:
        out.append(float8)
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
