"""Reports for the comparison tests: real CPU fits saved as their files hold them, and
plain-data reports made from them by editing figures (a slower run, a missing figure).

Import it after ``pytest.importorskip("torch")``: the real runs need torch.
"""

from __future__ import annotations

import atexit
import copy
import functools
import json
import os
import tempfile
from typing import Any

from accelkit.profiling.run_report import RunReport


@functools.cache
def _fit(width: int, batch: int) -> str:
    from ..helpers.torch_data import mlp, separable, train

    # windows of 10 steps: a CPU run of 64 to 128 steps holds several, so it has a spread
    report = train(mlp(16, width, 4), separable(batch=batch), epochs=4, window=10)
    handle, path = tempfile.mkstemp(suffix=".json", prefix="accelkit-compare-")
    os.close(handle)
    atexit.register(os.unlink, path)
    report.save(path)
    return path


def torch_run(width: int = 64, batch: int = 32) -> dict[str, Any]:
    """A real CPU fit of an MLP 16 -> `width` -> 4 on batches of `batch`, as saved."""
    with open(_fit(width, batch), encoding="utf-8") as handle:
        return json.load(handle)


def scaled(data: dict[str, Any], factor: float) -> dict[str, Any]:
    """`data` (a saved report) as if every step took `factor` times as long: step time
    and its windows times `factor`, samples/s, tokens/s and FLOP/s divided by it."""
    out = copy.deepcopy(data)
    for name in ("step_time_s",):
        out[name] = out[name] * factor if out.get(name) is not None else None
    for name in (
        "samples_per_second",
        "global_samples_per_second",
        "tokens_per_second",
        "achieved_tflops",
        "hardware_tflops",
        "mfu",
        "hfu",
    ):
        out[name] = out[name] / factor if out.get(name) is not None else None
    series = out.get("series") or {}
    for column, power in (("step_time_s", 1), ("input_wait_s", 1), ("samples_per_second", -1)):
        if column in series:
            series[column] = [v * factor**power if v is not None else None for v in series[column]]
    return out


def write(data: Any, folder: str, name: str) -> str:
    """`data` as the JSON file `name` in `folder`; its path."""
    path = os.path.join(folder, name)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(data, handle)
    return path


def report(data: dict[str, Any]) -> RunReport:
    return RunReport.from_dict(data)


def steady(data: dict[str, Any], spread: float = 0.01, windows: int = 5) -> dict[str, Any]:
    """`data` with its windows replaced by `windows` evenly spread from ``1 - spread`` to
    ``1 + spread`` times its step time: a run as steady as asked, whatever the machine's
    load was when the real one ran."""
    out = copy.deepcopy(data)
    step, rate = out["step_time_s"], out["samples_per_second"]
    wait = out.get("input_wait_share") or 0.0
    factors = [1 + spread * (2 * i / (windows - 1) - 1) for i in range(windows)]
    out["series"] = {
        "time_s": [float(i + 1) for i in range(windows)],
        "step": [float(10 * (i + 1)) for i in range(windows)],
        "step_time_s": [step * f for f in factors],
        "samples_per_second": [rate / f for f in factors],
        "input_wait_s": [step * f * wait for f in factors],
    }
    return out
