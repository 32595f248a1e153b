"""Imports torch and keras in the order argv[1] gives ("torch,keras"); auto_configure
is called twice first, and the current plan is recorded after each import."""

import json
import sys

import accelkit
from accelkit.frameworks import import_hook


def state(plan):
    return {
        "framework": plan.framework.value,
        "notes": list(plan.notes),
        "statuses": {s.key.value: s.status.value for s in plan.settings},
        "hooks": sum(isinstance(f, import_hook._Hook) for f in sys.meta_path),
        "modules": sorted(m for m in ("torch", "tensorflow", "keras") if m in sys.modules),
    }


accelkit.auto_configure(verbose=False)
plan = accelkit.auto_configure(verbose=False)
seen = {"plan": state(plan)}
for name in sys.argv[1].split(","):
    if name == "torch":
        import torch  # noqa: F401
    else:
        import keras

        seen["policy"] = keras.mixed_precision.global_policy().name
    seen[name] = state(accelkit.current_plan())
print(json.dumps(seen))
