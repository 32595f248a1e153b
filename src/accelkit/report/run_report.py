"""`RunReport`: what a profiled run measured, as data, a table and JSON."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accelkit.advisor.projection import Projection
    from accelkit.advisor.types import Advice
    from accelkit.hardware.info import HardwareInfo
    from accelkit.planning.types import Plan

SCHEMA = "accelkit.run_report/1"


@dataclasses.dataclass
class RunReport:
    """The measurements of one profiled run (on this process's devices).

    Every figure that could not be measured is None, with the reason in
    `notes[field]`. Steady-state figures exclude the warm-up steps.

    Attributes:
        samples_per_second: steady-state training throughput of this process.
        tokens_per_second: samples/s x tokens per sample, when known.
        flops_per_step: FLOPs of one training step (forward + backward), counted
            (`flops_method` says how) or given by the user.
        achieved_tflops: flops_per_step x steady steps / steady seconds / 1e12.
        peak_tflops: the dense datasheet peak for `matmul_dtype`, times the devices used.
        peak_source: the datasheet row's source, or why there is none.
        mfu: achieved_tflops / peak_tflops.
        calibrated_tflops, mfu_calibrated: the same against a matmul rate measured
            on the device at hand (`calibrate=True`).
        input_wait_share: share of steady-state time spent waiting for input.
        gpu_utilization: mean NVML utilisation (percent) over the steady state.
        peak_memory_bytes: the framework's peak device memory allocation.
        world_size, global_samples_per_second, scaling_efficiency: across the devices of
            a data-parallel run (a single device: 1, samples_per_second, None).
        ranks, slowest_rank: each process's figures (throughput, step time, input
            wait) and the rank with the longest steps.
        single_device_samples_per_second: the reference scaling efficiency is against.
        advice: the advisor's verdicts (`Advice.to_dict()`), most important first.
        facts: what the meters noticed for the advisor (layer sizes, loader settings,
            loss scale...; `accelkit.advisor.context` lists them).
    """

    framework: str
    model: str
    device: str
    precision: str
    matmul_dtype: str
    epochs: int | None = None
    steps: int = 0
    warmup_steps: int = 0
    warmup_seconds: float | None = None
    steady_steps: int = 0
    steady_seconds: float | None = None
    step_time_s: float | None = None
    batch_size: float | None = None
    samples_per_second: float | None = None
    tokens_per_second: float | None = None
    flops_per_step: float | None = None
    flops_method: str | None = None
    achieved_tflops: float | None = None
    peak_tflops: float | None = None
    peak_source: str | None = None
    mfu: float | None = None
    calibrated_tflops: float | None = None
    calibration_method: str | None = None
    mfu_calibrated: float | None = None
    input_wait_share: float | None = None
    gpu_utilization: float | None = None
    gpu_memory_used_bytes: int | None = None
    power_w: float | None = None
    sm_clock_mhz: float | None = None
    peak_memory_bytes: int | None = None
    world_size: int = 1
    global_samples_per_second: float | None = None
    scaling_efficiency: float | None = None
    # Per-process figures of a data-parallel run (accelkit.profiling.world).
    ranks: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    slowest_rank: int | None = None
    single_device_samples_per_second: float | None = None
    losses: list[float] = dataclasses.field(default_factory=list)
    interrupted: bool = False
    advice: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    facts: dict[str, Any] = dataclasses.field(default_factory=dict)
    notes: dict[str, str] = dataclasses.field(default_factory=dict)
    hardware: dict[str, Any] = dataclasses.field(default_factory=dict)
    plan: dict[str, Any] = dataclasses.field(default_factory=dict)
    versions: dict[str, str | None] = dataclasses.field(default_factory=dict)
    # Keras' History object from accelkit.keras.fit; not serialised.
    history: Any = dataclasses.field(default=None, repr=False, compare=False)

    def note(self, field: str, reason: str) -> None:
        """Record why `field` is missing (or how it was obtained)."""
        self.notes[field] = reason if field not in self.notes else f"{self.notes[field]}; {reason}"

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name != "history"}
        data["schema"] = SCHEMA
        return data

    def save(self, path: str | os.PathLike[str], *, every_rank: bool = False) -> bool:
        """Write the report as JSON (render it later with `accelkit report PATH`).

        Under torchrun every rank holds the whole run's report, so only rank 0
        writes (ranks writing one path would overwrite each other mid-write);
        ``every_rank=True`` writes on every rank, e.g. to a path with the rank in it.
        Returns True when this process wrote the file.
        """
        if not every_rank and os.environ.get("RANK", "0").strip() not in ("", "0"):
            return False
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(self.to_dict(), handle, indent=2, default=str)
            handle.write("\n")
        return True

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunReport:
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in fields})

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> RunReport:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
        if data.get("schema") != SCHEMA:
            raise ValueError(f"{path} is not an accelkit run report (schema {data.get('schema')!r}, "
                             f"expected {SCHEMA!r})")
        return cls.from_dict(data)

    def advise(self, hardware: HardwareInfo | None = None,
               plan: Plan | None = None) -> list[Advice]:
        """The advisor's verdicts for this run, or for other hardware and plan (a what-if).

        Args:
            hardware: default: the hardware the run was on, or `plan.hardware` when a
                plan is given.
            plan: default: the plan the run used.

        Example:
            >>> what_if = accelkit.plan_for("A100-SXM4-80GB", precision="fp32")
            >>> [a.title for a in report.advise(plan=what_if)]
        """
        from accelkit.advisor import advise
        from accelkit.hardware.info import HardwareInfo
        from accelkit.planning.types import Plan

        if plan is None:
            plan = Plan.from_dict(self.plan) if self.plan else None
            hardware = hardware or HardwareInfo.from_dict(self.hardware)
        return advise(hardware, plan, self)

    def refresh_advice(self, hardware: HardwareInfo | None = None,
                       plan: Plan | None = None) -> None:
        """Set `advice` from the advisor; a failing advisor leaves a note, never an error."""
        try:
            self.advice = [a.to_dict() for a in self.advise(hardware, plan)]
        except Exception as error:  # noqa: BLE001 - advice must never break a run
            self.note("advice", f"the advisor failed: {type(error).__name__}: {error}")

    def project(self, gpu: str, count: int = 1, price_per_hour: float | None = None, *,
                mfu: float | None = None, precision: str | None = None) -> Projection:
        """Estimated step and epoch time (and cost) of this run on `count` GPUs called `gpu`.

        At the run's MFU when it was measured against a GPU datasheet peak, else an
        assumed one; the result lists its assumptions. See `accelkit.advisor.projection`.

        Example:
            >>> print(report.project("H100 SXM", count=8, price_per_hour=2.5))
        """
        from accelkit.advisor.projection import project

        return project(self, gpu, count, price_per_hour, mfu=mfu, precision=precision)

    def __str__(self) -> str:
        from accelkit.report.render import render_run

        return render_run(self)
