"""Model FLOPs utilisation: achieved FLOP/s over the dense peak for the dtype the
matmuls really ran in.

MFU = FLOPs per step x steps / seconds / peak (PaLM, appendix B). The peak is
the datasheet's dense figure (no 2:4 sparsity) for:

- bf16 or fp16 under mixed precision,
- tf32 when the framework lets fp32 matmuls use TF32,
- fp32 otherwise

(`accelkit.hardware.capabilities.matmul_dtype`),

times the number of devices this process drives. Where part of a step's matmuls ran in
float8 (torchao's Float8Linear, inside bf16 autocast), MFU stays against that peak, and
`accelkit.profiling.metrics.float8_figures` gives the float8 share and the utilisation
against the peaks those FLOPs could reach, the float8 ones at `FLOAT8`'s.
"""

from __future__ import annotations

import dataclasses

from accelkit import specs
from accelkit.hardware.info import HardwareInfo

# The spec key of the dense peak float8 matmuls run at (`GpuSpec.peak_tflops`).
FLOAT8 = "fp8"


@dataclasses.dataclass(frozen=True)
class Peak:
    tflops: float | None  # for all devices used
    dtype: str
    source: str  # the datasheet row's source, or why there is no peak
    remedy: str = ""  # what measures a rate instead, said only where nothing did


def peak(hardware: HardwareInfo, dtype: str, devices: int = 1, gpu: int = 0) -> Peak:
    """The dense peak of `devices` GPUs like `hardware.gpus[gpu]` for `dtype`."""
    if not hardware.gpus:
        return Peak(
            None, dtype, "no GPU: CPUs have no datasheet peak", "calibrate=True measures one"
        )
    info = hardware.gpus[min(gpu, len(hardware.gpus) - 1)]
    if info.mig_enabled:
        return Peak(
            None,
            dtype,
            f"{info.name} is split into MIG slices: a slice's share of the peak is not known",
            "calibrate=True measures one",
        )
    spec = specs.for_gpu(info)
    if spec is None:
        return Peak(
            None,
            dtype,
            specs.unknown_message(info.name),
            "calibrate=True measures the achievable rate instead",
        )
    value = spec.peak(dtype)
    if value is None and spec.peaks_unknown:
        return Peak(None, dtype, f"{spec.name}: {spec.notes}")  # the notes say why and what to do
    if value is None:
        return Peak(None, dtype, f"{spec.name} has no {dtype} tensor path in its datasheet")
    return Peak(
        value * devices,
        dtype,
        f"{spec.name} dense {dtype} {value:g} TFLOP/s"
        f"{f' x {devices}' if devices > 1 else ''} ({spec.source})",
    )
