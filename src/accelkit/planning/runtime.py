"""Runtime decisions: memory allocation, autotuning, compilation, memory layout."""

from __future__ import annotations

from accelkit.hardware.info import HardwareInfo
from accelkit.planning.types import Framework, Precision, Request, Setting

# The allocator variable PyTorch reads; 2.9 renamed it from PYTORCH_CUDA_ALLOC_CONF,
# which it still reads. The torch adapter writes whichever the installed torch reads.
ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"


def settings(hardware: HardwareInfo, request: Request, precision: Precision) -> list[Setting]:
    if request.framework is Framework.TENSORFLOW:
        return _tensorflow(hardware, request)
    return _torch(hardware, request, precision)


def _torch(hardware: HardwareInfo, request: Request, precision: Precision) -> list[Setting]:
    out: list[Setting] = []
    if hardware.gpus:
        if request.fixed_shapes:
            out.append(Setting(
                "torch.backends.cudnn.benchmark", True, "torch",
                "input shapes are fixed: cuDNN times its convolution algorithms once per "
                "shape and keeps the fastest (turn off for variable-length inputs: "
                "fixed_shapes=False)"))
        out.append(Setting(
            ALLOC_CONF, "expandable_segments:True", "torch",
            "the caching allocator grows segments instead of fragmenting them, which "
            "avoids OOMs when tensor sizes vary; read only before CUDA initialises",
            kind="env"))
        cc = hardware.min_compute_capability
        if precision in (Precision.BF16, Precision.FP16) and cc and cc >= (7, 0):
            out.append(Setting(
                "channels_last", True, "torch",
                "convolution nets only: tensor-core convolutions run NHWC natively, NCHW "
                "costs a transpose per layer (accelkit.torch.fit converts conv models)",
                kind="helper"))
    if request.compile:
        out.append(Setting(
            "torch.compile", True, "torch",
            "requested compile=True: fuses elementwise ops and cuts Python overhead "
            "(applied by accelkit.torch.fit; the first steps compile)", kind="helper"))
    return out


def _tensorflow(hardware: HardwareInfo, request: Request) -> list[Setting]:
    out: list[Setting] = []
    if hardware.gpus:
        out.append(Setting(
            "tf.config.experimental.set_memory_growth", True, "tensorflow",
            "TensorFlow otherwise maps nearly all GPU memory at start-up, starving other "
            "processes and hiding what the model really uses; must be set before the GPUs "
            "initialise"))
        out.append(Setting(
            "TF_GPU_THREAD_MODE", "gpu_private", "tensorflow",
            "each GPU launches kernels from its own threads, so host work on the shared "
            "pool does not delay them (TensorFlow GPU performance guide); read at start-up",
            kind="env"))
    if request.compile:
        out.append(Setting(
            "keras.jit_compile", True, "tensorflow",
            "requested compile=True: XLA fuses the train step (model.compile(jit_compile=True), "
            "applied by accelkit.keras.fit)", kind="helper"))
    return out
