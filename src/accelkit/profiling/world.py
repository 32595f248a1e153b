"""Figures across the processes of a data-parallel run.

Each process measures itself; the framework side gathers one `rank_figures`
dict per process (`torch.distributed.all_gather_object`, or a file per worker)
and `aggregate` turns them into the report's global figures:

- global throughput = all samples of all ranks / the slowest rank's steady
  time (ranks run together; the run is as long as its slowest rank, and uneven
  batches are counted as they were);
- the slowest rank, by steady-state time per step;
- scaling efficiency = global throughput / (devices x the single-device
  throughput of the same run), when a single-device figure is known.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from accelkit.report.run_report import RunReport


def rank_figures(report: RunReport, rank: int, samples: int, devices: int = 1) -> dict[str, Any]:
    """What one process contributes: its steady-state samples and time, and its wait."""
    return {
        "rank": rank,
        "device": report.device,
        "devices": devices,
        "steady_samples": samples,
        "steady_seconds": report.steady_seconds,
        "steady_steps": report.steady_steps,
        "samples_per_second": report.samples_per_second,
        "step_time_s": report.step_time_s,
        "input_wait_share": report.input_wait_share,
    }


def aggregate(report: RunReport, ranks: Sequence[dict[str, Any]],
              single_device_samples_per_second: float | None = None) -> None:
    """Fill `world_size`, `ranks`, `slowest_rank`, `global_samples_per_second` and
    `scaling_efficiency` of `report` from every rank's figures."""
    report.ranks = [dict(r) for r in ranks]
    report.world_size = sum(int(r.get("devices") or 1) for r in ranks) or 1
    timed = [r for r in ranks if r.get("steady_seconds")]
    if len(timed) < len(ranks) or not timed:
        report.global_samples_per_second = None
        report.note("global_samples_per_second",
                    "some ranks have no steady-state time (too few steps)")
    else:
        slowest = max(timed, key=lambda r: r["steady_seconds"] / max(r["steady_steps"] or 1, 1))
        report.slowest_rank = int(slowest["rank"])
        report.global_samples_per_second = (sum(r["steady_samples"] for r in timed)
                                            / max(r["steady_seconds"] for r in timed))
    single = single_device_samples_per_second
    report.single_device_samples_per_second = single
    if single and report.global_samples_per_second:
        report.scaling_efficiency = report.global_samples_per_second / (report.world_size * single)
        report.notes.pop("scaling_efficiency", None)
    elif report.world_size > 1:
        report.note("scaling_efficiency", "no single-device figure to compare with: pass "
                                          "single_device= (a saved report or samples/s), or "
                                          "run `accelkit bench --compare-single`")
    else:
        report.note("scaling_efficiency", "a single device: nothing to scale against")
