"""Which `Meter.step` calls the meter counts: one per training step, none after the report.

A ``meter.step()`` opened inside another (a helper that measures its own steps,
called from a loop that does too) would count the step twice, doubling steps and
samples: the outermost one counts and the inner ones run unmeasured. A step
after ``meter.report()`` cannot change a report already built: it runs unmeasured
too. Both say so, once each, through ``logging.getLogger("accelkit")`` and in the
report's notes; neither raises, since the training step itself is fine.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from accelkit.profiling.run_report import RunReport

_log = logging.getLogger("accelkit")


class StepGuard:
    """Counts open `Meter.step` blocks and the ones left unmeasured.

    Example:
        >>> guard = StepGuard()
        >>> guard.enter(report=None)   # the outermost step: measured
        True
        >>> guard.enter(report=None)   # nested in it: not measured
        False
    """

    def __init__(self) -> None:
        self.depth = 0
        self.nested = 0
        self.late = 0

    def enter(self, report: RunReport | None) -> bool:
        """Open a step; True when the meter should measure it. `report`: the report the
        meter has built already, if any (a step after it is noted there)."""
        self.depth += 1
        if report is not None:
            self.late += 1
            if self.late == 1:
                _log.warning(
                    "accelkit: meter.step() after meter.report(): the report is "
                    "built, so this step and later ones are not counted"
                )
            report.notes["steps"] = (
                f"{self.late} meter.step() call(s) after report() were not counted"
            )
            return False
        if self.depth > 1:
            self.nested += 1
            if self.nested == 1:
                _log.warning(
                    "accelkit: meter.step() inside another meter.step(): the "
                    "outermost step counts, once; the nested ones are not counted"
                )
            return False
        return True

    def leave(self) -> None:
        """Close the step `enter` opened (also when its body raised)."""
        self.depth -= 1

    def notes(self) -> dict[str, str]:
        """What the report should say about steps left unmeasured."""
        if not self.nested:
            return {}
        return {
            "steps": f"{self.nested} meter.step() call(s) nested in another were not "
            "counted (the outermost counts each step once)"
        }
