"""A run's report, whole: the measured figures (`accelkit.profiling.assemble`) with
the advisor's verdicts on them. The meters of both frameworks end here."""

from __future__ import annotations

from accelkit.advisor import advise
from accelkit.hardware.info import HardwareInfo
from accelkit.planning.types import Plan
from accelkit.profiling.assemble import Measurements, report_from
from accelkit.profiling.run_report import RunReport


def build_report(measurements: Measurements) -> RunReport:
    """The `RunReport` of a run: its figures, then the advice for the hardware it ran on."""
    report = report_from(measurements)
    return with_advice(report, measurements.hardware, measurements.plan)


def with_advice(
    report: RunReport, hardware: HardwareInfo | None = None, plan: Plan | None = None
) -> RunReport:
    """Set `report.advice` from the advisor and return the report.

    Args:
        report: the run.
        hardware, plan: what to advise for; default: what the report ran on and with
            (a what-if GPU or plan gives the advice for that instead).

    A failing advisor leaves a note under ``notes["advice"]``, never an error: advice
    must not break a run.
    """
    try:
        report.advice = [a.to_dict() for a in advise(hardware, plan, report)]
    except Exception as error:  # noqa: BLE001 - advice must never break a run
        report.note("advice", f"the advisor failed: {type(error).__name__}: {error}")
    return report
