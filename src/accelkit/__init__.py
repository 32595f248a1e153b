"""accelkit: detect the GPU, apply the settings experts apply by hand, measure the run.

    import accelkit
    plan = accelkit.auto_configure()

`import accelkit` imports neither torch nor tensorflow; the framework adapters
(`accelkit.torch`, `accelkit.keras`) import theirs when used. accelkit speaks through
``logging.getLogger("accelkit")`` (`accelkit.utils.log`: INFO by default or
``ACCELKIT_LOG_LEVEL``, rank 0 only under a launcher).
"""

from typing import Any

from accelkit._version import __version__
from accelkit.configure import apply, auto_configure, current_plan, plan_for
from accelkit.dispatch import fit
from accelkit.hardware import detect
from accelkit.hardware import environment as _environment
from accelkit.hardware.info import GpuInfo, HardwareInfo
from accelkit.hardware.what_if import UnknownGPUError, what_if
from accelkit.planning import Distribution, Framework, Plan, Precision, Request, Setting, Status
from accelkit.profiling.run_report import RunReport
from accelkit.utils import log as _log

_log.setup(_environment.is_rank_zero, *_environment.log_level())

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
