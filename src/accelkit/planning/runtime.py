"""Runtime decisions: memory allocation, autotuning, compilation, memory layout."""

from __future__ import annotations

from accelkit.hardware import capabilities
from accelkit.hardware.info import HardwareInfo
from accelkit.planning.keys import Key
from accelkit.planning.types import Framework, Precision, Request, Setting


def settings(hardware: HardwareInfo, request: Request, precision: Precision) -> list[Setting]:
    if request.framework is Framework.TENSORFLOW:
        return _tensorflow(hardware, request)
    return _torch(hardware, request, precision)


def _torch(hardware: HardwareInfo, request: Request, precision: Precision) -> list[Setting]:
    out: list[Setting] = []
    if hardware.gpus:
        if request.deterministic:
            out.append(
                Setting(
                    Key.CUDNN_BENCHMARK,
                    False,
                    "deterministic=True: cuDNN benchmarking times the algorithms and may pick "
                    "another one on the next run, so results differ (PyTorch reproducibility "
                    "notes); also call torch.use_deterministic_algorithms(True) (PyTorch "
                    "releases whose notes still ask for it: CUBLAS_WORKSPACE_CONFIG=:4096:8 "
                    "before CUDA initialises)",
                )
            )
        elif request.fixed_shapes:
            out.append(
                Setting(
                    Key.CUDNN_BENCHMARK,
                    True,
                    "input shapes are fixed: cuDNN times its convolution algorithms once per "
                    "shape and keeps the fastest (turn off for variable-length inputs: "
                    "fixed_shapes=False)",
                )
            )
        out.append(
            Setting(
                Key.TORCH_ALLOC_CONF,
                "expandable_segments:True",
                "the caching allocator grows segments instead of fragmenting them, which "
                "avoids OOMs when tensor sizes vary; read only before CUDA initialises "
                "(PyTorch >= 2.9 also reads PYTORCH_ALLOC_CONF; a user value in either is kept)",
            )
        )
        if capabilities.is_mixed(precision.without_float8) and capabilities.all_have_tensor_cores(
            hardware.gpus
        ):
            out.append(
                Setting(
                    Key.CHANNELS_LAST,
                    True,
                    "convolution nets only: tensor-core convolutions run NHWC natively, NCHW "
                    "costs a transpose per layer (accelkit.torch.fit converts conv models)",
                )
            )
    if request.compile:
        out.append(
            Setting(
                Key.TORCH_COMPILE,
                True,
                "requested compile=True: fuses elementwise ops and cuts Python overhead "
                "(applied by accelkit.torch.fit; the first steps compile)",
            )
        )
    return out


def _tensorflow(hardware: HardwareInfo, request: Request) -> list[Setting]:
    out: list[Setting] = []
    if hardware.gpus:
        out.append(
            Setting(
                Key.TF_MEMORY_GROWTH,
                True,
                "TensorFlow otherwise maps nearly all GPU memory at start-up, starving other "
                "processes and hiding what the model really uses; must be set before the GPUs "
                "initialise",
            )
        )
        out.append(
            Setting(
                Key.TF_GPU_THREAD_MODE,
                "gpu_private",
                "each GPU launches kernels from its own threads, so host work on the shared "
                "pool does not delay them (TensorFlow GPU performance guide); read at start-up",
            )
        )
    if request.compile:
        out.append(
            Setting(
                Key.KERAS_JIT_COMPILE,
                True,
                "requested compile=True: XLA fuses the train step "
                "(model.compile(jit_compile=True), applied by accelkit.keras.fit)",
            )
        )
    return out
