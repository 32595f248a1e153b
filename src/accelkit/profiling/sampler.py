"""A background thread sampling NVML about ten times a second during a run.

It reads, per GPU in use: utilisation (share of time a kernel was running),
memory used, power draw and SM clock. It never raises into the run: an NVML
error stops the sampling and leaves a note. Use it as a context manager so the
thread is gone when the run ends, however it ends.

Besides the samples, it keeps one bounded series over the run (`BoundedSeries`: at
most 512 points, neighbours averaged, memory by its maximum): per tick, the mean
utilisation, power and SM clock of the devices and their largest memory use.
"""

from __future__ import annotations

import dataclasses
import statistics
import threading
import time
from collections.abc import Sequence
from typing import Any

from accelkit.profiling.clock import BoundedSeries

SERIES_COLUMNS = ("time", "gpu_utilization", "gpu_memory_used_bytes", "power_w", "sm_clock_mhz")


@dataclasses.dataclass(frozen=True)
class Sample:
    time: float  # time.perf_counter()
    device: int  # NVML index
    utilization: float | None  # percent
    memory_used_bytes: int | None
    power_w: float | None
    sm_clock_mhz: float | None


@dataclasses.dataclass(frozen=True)
class SamplerSummary:
    samples: int
    gpu_utilization: float | None  # mean percent over the window, all devices
    memory_used_bytes: int | None  # max over the window
    power_w: float | None  # mean
    sm_clock_mhz: float | None  # mean
    # The bounded series from `start` on (`SERIES_COLUMNS`; time is perf_counter()).
    series: dict[str, list[float | None]] = dataclasses.field(default_factory=dict)


class NvmlSampler:
    """Samples NVML devices in a daemon thread.

    Args:
        devices: NVML indices of the GPUs in use (`HardwareInfo.gpus[i].index`).
        interval: seconds between samples.
        nvml: the pynvml module (injectable for tests); imported when None.

    Example:
        >>> import time
        >>> start = time.perf_counter()
        >>> with NvmlSampler([0]) as sampler:
        ...     time.sleep(0.3)              # training
        >>> sampler.summary(start, time.perf_counter()).gpu_utilization  # doctest: +SKIP
        97.5
    """

    def __init__(self, devices: Sequence[int], interval: float = 0.1, nvml: Any = None) -> None:
        self.devices = list(devices)
        self.interval = interval
        self.samples: list[Sample] = []
        self.notes: list[str] = []
        self.series = BoundedSeries(SERIES_COLUMNS, peak=("gpu_memory_used_bytes",))
        self._nvml = nvml
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> NvmlSampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        if not self.devices:
            return
        try:
            if self._nvml is None:
                import pynvml

                self._nvml = pynvml
            self._nvml.nvmlInit()
            self._handles = [self._nvml.nvmlDeviceGetHandleByIndex(i) for i in self.devices]
        except Exception as error:  # noqa: BLE001 - sampling is optional
            self.notes.append(f"NVML sampling unavailable: {error}")
            return
        self._thread = threading.Thread(target=self._run, name="accelkit-nvml", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
            try:
                self._nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001, S110 - nothing to do about a failed shutdown
                pass

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                now = time.perf_counter()
                tick = [
                    self._read(now, index, handle)
                    for index, handle in zip(self.devices, self._handles)
                ]
                self.samples.extend(tick)
                self.series.add(_row(now, tick))
            except Exception as error:  # noqa: BLE001 - a sampler must not kill the run
                self.notes.append(f"NVML sampling stopped: {error}")
                return
            self._stop.wait(self.interval)

    def _read(self, now: float, index: int, handle: Any) -> Sample:
        nvml = self._nvml
        return Sample(
            time=now,
            device=index,
            utilization=float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu),
            memory_used_bytes=int(nvml.nvmlDeviceGetMemoryInfo(handle).used),
            power_w=nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
            sm_clock_mhz=float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
        )

    def summary(self, start: float | None = None, end: float | None = None) -> SamplerSummary:
        """Figures over samples taken between `start` and `end` (perf_counter times)."""
        chosen = [
            s
            for s in self.samples
            if (start is None or s.time >= start) and (end is None or s.time <= end)
        ]

        def mean(values: list[float]) -> float | None:
            return statistics.fmean(values) if values else None

        memory = [s.memory_used_bytes for s in chosen if s.memory_used_bytes is not None]
        columns = self.series.columns()
        keep = [
            i
            for i, t in enumerate(columns.get("time", ()))
            if (start is None or t >= start) and (end is None or t <= end)
        ]
        return SamplerSummary(
            samples=len(chosen),
            gpu_utilization=mean([s.utilization for s in chosen if s.utilization is not None]),
            memory_used_bytes=max(memory) if memory else None,
            power_w=mean([s.power_w for s in chosen if s.power_w is not None]),
            sm_clock_mhz=mean([s.sm_clock_mhz for s in chosen if s.sm_clock_mhz is not None]),
            series={name: [values[i] for i in keep] for name, values in columns.items()}
            if keep
            else {},
        )


def _row(now: float, tick: Sequence[Sample]) -> tuple[float | None, ...]:
    """One series point from the devices' samples of one tick."""

    def mean(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return statistics.fmean(known) if known else None

    memory = [s.memory_used_bytes for s in tick if s.memory_used_bytes is not None]
    return (
        now,
        mean([s.utilization for s in tick]),
        float(max(memory)) if memory else None,
        mean([s.power_w for s in tick]),
        mean([s.sm_clock_mhz for s in tick]),
    )
