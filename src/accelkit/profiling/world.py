"""Figures across the processes of a data-parallel run.

Each process measures itself; the framework side gathers one `rank_figures`
dict per process (`torch.distributed.all_gather_object`, or TensorFlow's collectives)
and `aggregate` turns them into the report's global figures:

- global throughput = all samples of all ranks / the slowest rank's steady
  time (ranks run together; the run is as long as its slowest rank, and uneven
  batches are counted as they were);
- the slowest rank, by steady-state time per step;
- scaling efficiency = global throughput / (devices x the single-device
  throughput of the same run), when a single-device figure is known;
- per rank, the time each step waited for the gradient all-reduce
  (``communication_s``, ``communication_share``), where it was measured.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from accelkit.profiling.run_report import RunReport


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
        "communication_s": report.communication_s,
        "communication_share": report.communication_share,
        "all_reduce_in_flight_s": (report.facts.get("communication") or {}).get("in_flight_s"),
    }


def aggregate(
    report: RunReport,
    ranks: Sequence[dict[str, Any]],
    single_device_samples_per_second: float | None = None,
) -> None:
    """Fill `world_size`, `ranks`, `slowest_rank`, `global_samples_per_second` and
    `scaling_efficiency` of `report` from every rank's figures."""
    report.ranks = [dict(r) for r in ranks]
    report.world_size = sum(int(r.get("devices") or 1) for r in ranks) or 1
    timed = [r for r in ranks if r.get("steady_seconds")]
    if len(timed) < len(ranks) or not timed:
        report.global_samples_per_second = None
        report.note(
            "global_samples_per_second", "some ranks have no steady-state time (too few steps)"
        )
    else:
        slowest = max(timed, key=lambda r: r["steady_seconds"] / max(r["steady_steps"] or 1, 1))
        report.slowest_rank = int(slowest["rank"])
        report.global_samples_per_second = sum(r["steady_samples"] for r in timed) / max(
            r["steady_seconds"] for r in timed
        )
    single = single_device_samples_per_second
    report.single_device_samples_per_second = single
    if single and report.global_samples_per_second:
        report.scaling_efficiency = report.global_samples_per_second / (report.world_size * single)
        report.notes.pop("scaling_efficiency", None)
    elif report.world_size > 1:
        report.note(
            "scaling_efficiency",
            "no single-device figure to compare with: pass "
            "single_device= (a saved report or samples/s), or "
            "run `accelkit bench --compare-single`",
        )
    else:
        report.note("scaling_efficiency", "a single device: nothing to scale against")
    if report.world_size > 1 and report.communication_share is None:
        report.notes.setdefault("communication_share", NOT_TIMED)


NOT_TIMED = (
    "the gradient all-reduce is timed in PyTorch DistributedDataParallel runs of "
    "accelkit.torch.fit and of the Lightning and Hugging Face callbacks (and Meter "
    "with accelkit.torch.distributed.communication.timed); not here"
)


def single_device_rate(value: Any) -> float | None:
    """Samples/s of the same run on one device, the reference of `scaling_efficiency`,
    from what every fit and meter takes as ``single_device=`` (both frameworks).

    Args:
        value: None; a number (samples/s of one device); a `RunReport` of a
            single-device run; or the path of one saved with `report.save`.

    Raises:
        ValueError: a number <= 0, a report of several devices, a report without
            a steady-state throughput, or a file that is not a run report.
        TypeError: anything else.

    Example:
        >>> single_device_rate(1234.5)
        1234.5
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise TypeError(
            f"single_device={value!r} is not valid: give a RunReport, a report "
            "path or samples/s of one device"
        )
    if isinstance(value, (int, float)):
        if not value > 0:
            raise ValueError(
                f"single_device={value!r} is not valid: it must be samples/s > 0 of one device"
            )
        return float(value)
    if isinstance(value, (str, os.PathLike)):
        try:
            value = RunReport.load(value)
        except (OSError, ValueError) as error:
            raise ValueError(f"single_device={str(value)!r}: {error}") from None
    if not isinstance(value, RunReport):
        raise TypeError(
            f"single_device is not valid: it takes a RunReport, a report path or "
            f"samples/s; got {type(value).__name__}"
        )
    if value.world_size > 1:
        raise ValueError(
            f"single_device: that report ran on {value.world_size} devices; "
            "give a run on one device"
        )
    if not value.samples_per_second:
        raise ValueError(
            "single_device: that report has no steady-state samples/s "
            f"({value.notes.get('samples_per_second', 'not measured')})"
        )
    return float(value.samples_per_second)
