"""A PyTorch script: accelkit first, then torch."""

import json
import sys

import accelkit
from accelkit.frameworks import import_hook

plan = accelkit.auto_configure(verbose=False)
seen = {
    "plan": {
        "framework": plan.framework.value,
        "notes": list(plan.notes),
        "statuses": sorted({s.status.value for s in plan.settings}),
    },
    "before": sorted(m for m in ("torch", "tensorflow", "keras") if m in sys.modules),
}
import torch  # noqa: F401

seen["after"] = sorted(m for m in ("torch", "tensorflow", "keras") if m in sys.modules)
seen["current"] = {
    "framework": accelkit.current_plan().framework.value,
    "notes": list(accelkit.current_plan().notes),
    "statuses": sorted({s.status.value for s in accelkit.current_plan().settings}),
}
seen["waiting"] = list(import_hook.watching())
print(json.dumps(seen))
