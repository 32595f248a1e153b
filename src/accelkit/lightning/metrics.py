"""The figures `AccelkitCallback` logs every window, and their names in the loggers.

Each is this process's figure over the last window (rank 0's under DDP: only rank 0
logs); a figure that cannot be had (MFU on a CPU, GPU figures without NVML) is left
out of that window's row rather than logged as 0.

| name | what |
|---|---|
| ``accelkit/samples_per_second`` | samples per second over the window |
| ``accelkit/tokens_per_second`` | token positions per second (integer (B, T) token ids) |
| ``accelkit/step_time_s`` | seconds per step, device-synchronised at the window's end |
| ``accelkit/achieved_tflops`` | counted FLOPs per step / step time |
| ``accelkit/mfu`` | achieved / the datasheet's dense peak for the plan's matmul dtype |
| ``accelkit/input_wait_share`` | share of the window spent between steps (loading data) |
| ``accelkit/gpu_utilization`` | NVML utilisation, percent, mean over the window |
| ``accelkit/gpu_memory_used_bytes`` | NVML memory used, max over the window |
| ``accelkit/power_w`` | NVML power draw, mean over the window |
"""

from __future__ import annotations

from typing import Any

PREFIX = "accelkit/"
SAMPLES_PER_SECOND = PREFIX + "samples_per_second"
TOKENS_PER_SECOND = PREFIX + "tokens_per_second"
STEP_TIME_S = PREFIX + "step_time_s"
ACHIEVED_TFLOPS = PREFIX + "achieved_tflops"
MFU = PREFIX + "mfu"
INPUT_WAIT_SHARE = PREFIX + "input_wait_share"
GPU_UTILIZATION = PREFIX + "gpu_utilization"
GPU_MEMORY_USED_BYTES = PREFIX + "gpu_memory_used_bytes"
POWER_W = PREFIX + "power_w"


def window_figures(
    *,
    step_s: float,
    steps: int,
    samples: int | None,
    tokens: int,
    flops: float | None,
    peak_tflops: float | None,
    input_wait_s: float,
    gpu: Any = None,
) -> dict[str, float]:
    """One window's row: per-step figures of its last batch over its mean step time.

    Args:
        step_s: mean seconds per step over the window (`Meter.on_window`'s figure).
        steps: steps in the window; samples, tokens: of one step (its last batch).
        flops: FLOPs of one step, None when not counted.
        peak_tflops: the peak MFU is taken against, None when unknown.
        input_wait_s: seconds spent between steps in the window.
        gpu: a `SamplerSummary` over the window, or None.

    Example:
        >>> window_figures(step_s=0.5, steps=10, samples=32, tokens=0, flops=None,
        ...                peak_tflops=None, input_wait_s=1.0)[SAMPLES_PER_SECOND]
        64.0
    """
    row: dict[str, float] = {STEP_TIME_S: step_s}
    if step_s <= 0:
        return row
    if samples:
        row[SAMPLES_PER_SECOND] = samples / step_s
    if tokens:
        row[TOKENS_PER_SECOND] = tokens / step_s
    if flops:
        row[ACHIEVED_TFLOPS] = flops / step_s / 1e12
        if peak_tflops:
            row[MFU] = row[ACHIEVED_TFLOPS] / peak_tflops
    row[INPUT_WAIT_SHARE] = min(1.0, input_wait_s / (step_s * steps)) if steps else 0.0
    if gpu is not None:
        for name, value in (
            (GPU_UTILIZATION, gpu.gpu_utilization),
            (GPU_MEMORY_USED_BYTES, gpu.memory_used_bytes),
            (POWER_W, gpu.power_w),
        ):
            if value is not None:
                row[name] = float(value)
    return row
