"""A Keras script: accelkit first, then Keras (argv[1] == "plan-only": stop before importing it)."""

import json
import sys

import accelkit

plan = accelkit.auto_configure(verbose=False)
seen = {
    "plan": {"framework": plan.framework.value, "notes": list(plan.notes)},
    "before": sorted(m for m in ("torch", "tensorflow", "keras") if m in sys.modules),
}
if sys.argv[1:] != ["plan-only"]:
    import keras

    seen["policy"] = keras.mixed_precision.global_policy().name
seen["after"] = sorted(m for m in ("torch", "tensorflow", "keras") if m in sys.modules)
print(json.dumps(seen))
