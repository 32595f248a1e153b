"""What the report-file tests share: a saved report as JSON, and any JSON value."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from accelkit.profiling.run_report import RunReport

# Any value a JSON file can hold, small.
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)


def saved_report() -> dict[str, Any]:
    """A small CPU run's report as its file holds it."""
    report = RunReport(
        framework="torch",
        model="m",
        device="cpu",
        precision="fp32",
        matmul_dtype="fp32",
        samples_per_second=10.0,
        steps=5,
    )
    return json.loads(json.dumps(report.to_dict()))


def names_field(message: str, field: str) -> bool:
    """Whether an error message names `field` (or a field inside it)."""
    return any(f"{quote}{field}{end}" in message for quote in "'\"" for end in "'\".[")
