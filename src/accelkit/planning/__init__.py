"""Planning: a pure function from (hardware, request) to an immutable `Plan`."""

from accelkit.planning.planner import lacks_model_size, plan, with_model_size
from accelkit.planning.types import (
    Distribution,
    Framework,
    MemoryEstimate,
    Optimizer,
    Plan,
    Precision,
    Request,
    Setting,
    Status,
)

__all__ = [
    "Distribution",
    "Framework",
    "MemoryEstimate",
    "Optimizer",
    "Plan",
    "Precision",
    "Request",
    "Setting",
    "Status",
    "lacks_model_size",
    "plan",
    "with_model_size",
]
