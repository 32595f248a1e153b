"""memory_prediction when the activations were measured on the run's first step: the
re-plan it gives carries them and what the estimate missed (issue 26)."""

from __future__ import annotations

from accelkit.advisor.context import Context
from accelkit.advisor.rules.memory import memory_prediction


def _ctx(facts: dict) -> Context:
    return Context.build(None, None, {"peak_memory_bytes": 30e9, "facts": facts})


def test_measured_activations_and_what_was_missed_go_into_the_re_plan() -> None:
    found = memory_prediction(
        _ctx({"predicted_memory_bytes": 20e9, "activation_bytes": 8e9, "memory_choice": "none"})
    )
    assert found is not None
    assert found.evidence["activation_gb"] == 8.0
    assert "activation_bytes=18000000000" in found.action  # 8 GB measured + 10 GB missed
    assert "missed 10.00 GB" in found.action


def test_without_measured_activations_the_re_plan_asks_for_them() -> None:
    found = memory_prediction(_ctx({"predicted_memory_bytes": 20e9}))
    assert found is not None and "activation_gb" not in found.evidence
    assert "activation_bytes=<peak - state>" in found.action
