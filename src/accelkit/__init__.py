"""accelkit: detect the GPU, apply the settings experts apply by hand, measure the run.

    import accelkit
    plan = accelkit.auto_configure()

`import accelkit` imports neither torch nor tensorflow; the framework adapters
(`accelkit.torch`, `accelkit.keras`) import theirs when used. accelkit speaks through
``logging.getLogger("accelkit")`` (`accelkit.utils.log`: INFO by default or
``ACCELKIT_LOG_LEVEL``, rank 0 only under a launcher).
"""

import os
from typing import TYPE_CHECKING, Any

from accelkit._version import __version__
from accelkit.configure import apply, auto_configure, current_plan, plan_for
from accelkit.dispatch import fit
from accelkit.frameworks import torch_precision as _torch_precision
from accelkit.hardware import detect
from accelkit.hardware import environment as _environment
from accelkit.hardware.info import GpuInfo, HardwareInfo
from accelkit.hardware.what_if import UnknownGPUError, what_if
from accelkit.planning import Distribution, Framework, Plan, Precision, Request, Setting, Status
from accelkit.planning import types as _plan_types
from accelkit.profiling import run_report as _run_report
from accelkit.profiling.run_report import RunReport
from accelkit.utils import log as _log

if TYPE_CHECKING:
    from accelkit.report.comparison import Comparison

_log.setup(_environment.is_rank_zero, *_environment.log_level())


# A plan and a run report are data: planning and profiling import no framework and no
# report. Their tables, the report's HTML page and the plan's PyTorch helpers are given
# to them here, from the stages that own them (docs/architecture.md); the report's
# modules are imported on first use, so that `import accelkit` stays fast.
def _plan_table(plan: Plan) -> str:
    from accelkit.report.render import render_plan

    return render_plan(plan)


def _run_table(report: RunReport) -> str:
    from accelkit.report.render import render_run

    return render_run(report)


def _run_page(report: RunReport) -> str:
    from accelkit.report.html import render_html

    return render_html(report)


def compare(
    base: RunReport | str | os.PathLike[str], new: RunReport | str | os.PathLike[str]
) -> "Comparison":
    """Compare the run `new` with the run `base` (`RunReport`s or saved reports' paths):
    what differs in the set-up, each figure side by side with a verdict beyond the
    runs' noise or not, the advice that appeared or went away
    (`accelkit.report.comparison.compare`, which documents the rule).

    Example:
        >>> accelkit.compare("base.json", "new.json").figure("step_time_s")  # doctest: +SKIP
    """
    from accelkit.report.comparison import compare as _compare

    return _compare(base, new)


_plan_types.GIVEN = _plan_types.Given(
    table=_plan_table,
    autocast=_torch_precision.autocast,
    grad_scaler=_torch_precision.grad_scaler,
)
_run_report.GIVEN = _run_report.Given(table=_run_table, html=_run_page)

__all__ = [
    "Distribution",
    "Framework",
    "GpuInfo",
    "HardwareInfo",
    "Plan",
    "Precision",
    "Request",
    "RunReport",
    "Setting",
    "Status",
    "UnknownGPUError",
    "__version__",
    "apply",
    "auto_configure",
    "compare",
    "current_plan",
    "detect",
    "fit",
    "plan_for",
    "what_if",
]


# The packages that import a framework or a trainer: loaded on first use, so that
# `import accelkit` imports none of them.
_LAZY = ("torch", "keras", "lightning", "hf", "advisor", "bench")


def __getattr__(name: str) -> Any:  # PEP 562: submodules on first use
    if name in _LAZY:
        import importlib

        return importlib.import_module(f"accelkit.{name}")
    raise AttributeError(f"module 'accelkit' has no attribute {name!r}")
