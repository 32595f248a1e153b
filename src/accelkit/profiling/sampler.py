"""A background thread sampling NVML about ten times a second during a run.

It reads, per GPU in use: utilisation (share of time a kernel was running),
memory used, power draw and SM clock. It never raises into the run: an NVML
error stops the sampling and leaves a note. Use it as a context manager so the
thread is gone when the run ends, however it ends.

Besides the samples, it keeps one bounded series over the run (`BoundedSeries`: at
most 512 points, neighbours averaged, memory by its maximum): per tick, the mean
utilisation, power and SM clock of the devices and their largest memory use.

Memory stays bounded however long the run: once the meter says where the steady
state starts (`keep_totals_from`, when its warm-up ends), the samples from then on
are summed as they come, and only the last `RECENT_S` seconds of raw samples are
kept, for the figures of recent windows. Until then (the warm-up: seconds) every
sample is kept.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import statistics
import threading
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from accelkit.profiling.clock import BoundedSeries

if TYPE_CHECKING:
    from typing_extensions import Self

SERIES_COLUMNS = ("time", "gpu_utilization", "gpu_memory_used_bytes", "power_w", "sm_clock_mhz")
# Raw samples kept once totals run: the window figures (a Lightning or HF logging
# window) look back seconds to minutes; ten minutes is 6,000 ticks a device.
RECENT_S = 600.0


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


@dataclasses.dataclass
class _Totals:
    """Sums of samples, for means over any number of them in constant memory."""

    samples: int = 0
    utilization: tuple[float, int] = (0.0, 0)  # (sum, count) of the known values
    power_w: tuple[float, int] = (0.0, 0)
    sm_clock_mhz: tuple[float, int] = (0.0, 0)
    memory_used_bytes: int | None = None  # the largest

    @classmethod
    def of(cls, samples: Iterable[Sample]) -> _Totals:
        totals = cls()
        for sample in samples:
            totals.add(sample)
        return totals

    def add(self, sample: Sample, sign: int = 1) -> None:
        """Add `sample` (``sign=-1``: take it out again; the memory maximum stays)."""
        self.samples += sign
        self.utilization = _plus(self.utilization, sample.utilization, sign)
        self.power_w = _plus(self.power_w, sample.power_w, sign)
        self.sm_clock_mhz = _plus(self.sm_clock_mhz, sample.sm_clock_mhz, sign)
        if sample.memory_used_bytes is not None:
            self.memory_used_bytes = max(self.memory_used_bytes or 0, sample.memory_used_bytes)


def _plus(total: tuple[float, int], value: float | None, sign: int = 1) -> tuple[float, int]:
    return total if value is None else (total[0] + sign * value, total[1] + sign)


def _mean(total: tuple[float, int]) -> float | None:
    return total[0] / total[1] if total[1] else None


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
        self.samples: collections.deque[Sample] = collections.deque()
        self.notes: list[str] = []
        self._totals_from: float | None = None
        self._totals = _Totals()
        self._breaks: list[tuple[float, float]] = []  # not training: left out of totals
        self._lock = threading.Lock()  # samples and totals: the thread writes, summary reads
        self.series = BoundedSeries(SERIES_COLUMNS, peak=("gpu_memory_used_bytes",))
        self._nvml = nvml
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Self:
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
            with contextlib.suppress(Exception):  # nothing to do about a failed shutdown
                self._nvml.nvmlShutdown()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                now = time.perf_counter()
                tick = [
                    self._read(now, index, handle)
                    for index, handle in zip(self.devices, self._handles, strict=True)
                ]
                self._keep(now, tick)
                self.series.add(_row(now, tick))
            except Exception as error:  # noqa: BLE001 - a sampler must not kill the run
                self.notes.append(f"NVML sampling stopped: {error}")
                return
            self._stop.wait(self.interval)

    def keep_totals_from(self, start: float) -> None:
        """Sum the samples taken from `start` (a perf_counter time) on as they come, and
        from then on keep only the last `RECENT_S` seconds of raw samples: `summary(start)`
        stays exact and memory bounded however long the run. The first call decides;
        later ones are ignored (a meter calls this at each steady window boundary)."""
        with self._lock:
            if self._totals_from is not None:
                return
            self._totals_from = start
            self._totals = _Totals.of(
                s for s in self.samples if s.time >= start and not self._in_break(s.time)
            )

    def exclude(self, start: float, end: float) -> None:
        """Leave the samples taken from `start` to `end` (perf_counter times: an
        evaluation, a checkpoint) out of the training figures, `summary`'s totals; the
        series keeps them, since the chart shows the whole run."""
        with self._lock:
            self._breaks.append((start, end))
            if self._totals_from is None:
                return
            for sample in self.samples:
                if start <= sample.time <= end and sample.time >= self._totals_from:
                    self._totals.add(sample, sign=-1)

    def _in_break(self, time: float) -> bool:
        return any(start <= time <= end for start, end in self._breaks[-64:])

    def _keep(self, now: float, tick: list[Sample]) -> None:
        with self._lock:
            self.samples.extend(tick)
            since = self._totals_from
            if since is None:
                return
            for sample in tick:
                if sample.time >= since:  # `exclude` takes a break's samples out again
                    self._totals.add(sample)
            while self.samples[0].time < now - RECENT_S:
                self.samples.popleft()

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
        """Figures over samples taken between `start` and `end` (perf_counter times): from
        the running totals when `start` is where they start and `end` is None (the whole
        steady state), else from the raw samples kept (the recent ones, once totals run)."""
        with self._lock:
            if end is None and start is not None and start == self._totals_from:
                totals = dataclasses.replace(self._totals)
            else:
                totals = _Totals.of(
                    s
                    for s in self.samples
                    if (start is None or s.time >= start)
                    and (end is None or s.time <= end)
                    and not self._in_break(s.time)
                )
        columns = self.series.columns()
        keep = [
            i
            for i, t in enumerate(columns.get("time", ()))
            if t is not None and (start is None or t >= start) and (end is None or t <= end)
        ]
        return SamplerSummary(
            samples=totals.samples,
            gpu_utilization=_mean(totals.utilization),
            memory_used_bytes=totals.memory_used_bytes,
            power_w=_mean(totals.power_w),
            sm_clock_mhz=_mean(totals.sm_clock_mhz),
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
