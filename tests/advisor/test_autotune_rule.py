"""The `max_autotune` rule on plain data: a long compiled run whose tune skipped
max-autotune because it did not know the run's length."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelkit import what_if
from accelkit.advisor import advise
from accelkit.advisor.context import Context
from accelkit.advisor.rules import autotune
from accelkit.profiling.tuning import AUTOTUNE_SHARE, autotune_cost

from .helpers import measured_on

H200 = what_if("H200")
UNKNOWN = "the run's length is unknown (no steps= and no len(loader))"


def record(
    *, compile_status: str = "chosen", autotune: dict[str, Any] | None = None
) -> dict[str, Any]:
    eager = {
        "name": "eager",
        "status": "baseline",
        "step_seconds": 0.05,
        "settings": {"compile": False, "optimizer": "default"},
    }
    compiled = {
        "name": "compile+fused",
        "status": compile_status,
        "step_seconds": 0.03,
        "compile_seconds": 40.0,
        "settings": {"compile": True, "optimizer": "fused"},
    }
    skipped = {"name": "max-autotune", "status": "skipped", "settings": {}, "why": UNKNOWN}
    return {"decision": "tuned", "candidates": [eager, compiled, autotune or skipped]}  # fmt: skip


def rule(trained: float | None = 7200.0, **figures: Any) -> Any:
    figures.setdefault("tuning", record())
    m = measured_on(H200, steady_seconds=trained, **figures)
    return autotune.max_autotune(Context.build(H200, None, m))


def test_a_long_run_that_did_not_tell_its_length_is_told_to() -> None:
    found = rule()
    assert found.id == "max_autotune" and found.speedup is None
    assert "steps=N" in found.action and "max-autotune-no-cudagraphs" in found.action
    assert "7,200 s" in found.title and "about 480 s" in found.title  # 12 x 40 s
    assert found.evidence["tune.compile_s"] == 40.0
    assert "not measured" in found.expected_gain
    # through the registry, too
    m = measured_on(H200, steady_seconds=7200.0, tuning=record())
    assert "max_autotune" in [a.id for a in advise(H200, None, m)]


@given(trained=st.floats(1.0, 1e6), compile_seconds=st.floats(0.0, 600.0))
def test_it_speaks_exactly_when_the_run_trained_long_enough_to_pay(
    trained: float, compile_seconds: float
) -> None:
    tuned = record()
    tuned["candidates"][1]["compile_seconds"] = compile_seconds
    found = rule(trained, tuning=tuned)
    assert (found is not None) == (autotune_cost(compile_seconds) <= AUTOTUNE_SHARE * trained)


TOO_SHORT = {
    "name": "max-autotune",
    "status": "skipped",
    "settings": {},
    "why": "the run's 300 s left would not pay back max-autotune's compilation",
}
TRIED = {"name": "max-autotune", "status": "slower", "step_seconds": 0.031,
         "settings": {"compile": True, "optimizer": "fused",
                      "compile_mode": "max-autotune-no-cudagraphs"}}  # fmt: skip


@pytest.mark.parametrize(
    "tuned",
    [
        record(compile_status="slower"),
        record(autotune=TOO_SHORT),
        record(autotune=TRIED),
        {"decision": "not tuned: tune='auto' tunes GPU runs", "candidates": []},
    ],
    ids=["compile not kept", "too short", "tried", "not tuned"],
)
def test_quiet_where_tune_weighed_it_or_could_not_use_it(tuned: dict[str, Any]) -> None:
    assert rule(tuning=tuned) is None


def test_quiet_for_keras_and_without_the_run_time() -> None:
    assert rule(framework="tensorflow") is None
    assert rule(trained=None) is None
