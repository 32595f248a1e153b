"""`accelkit.advisor.tuning`: what the rules read of ``report.tuning``. A candidate's
figure against the baseline is its paired rounds' (issue 35, case E15), not the ratio of
medians timed apart, which load on the machine inflates."""

from __future__ import annotations

from typing import Any

from accelkit.advisor import tuning
from accelkit.advisor.context import Context


def record(*candidates: dict[str, Any]) -> Context:
    return Context.build(None, None, {"tuning": {"decision": "tuned", "candidates": candidates}})


def test_a_candidates_speedup_is_its_paired_figure_not_medians_timed_apart() -> None:
    ctx = record(
        # the baseline's steps ran under load: 400 ms against 10 ms a few steps later
        {"name": "eager", "status": "baseline", "step_seconds": 0.4, "settings": {}},
        {"name": "eager+fused", "status": "chosen", "step_seconds": 0.01,
         "settings": {"optimizer": "fused"}, "paired_speedup": 1.2,
         "paired_spread": [1.1, 1.3], "against": "eager"},
        {"name": "compile+fused", "status": "slower", "step_seconds": 0.012,
         "settings": {"optimizer": "fused", "compile": True}, "paired_speedup": 0.9,
         "paired_spread": [0.8, 1.0], "against": "eager+fused"},
    )  # fmt: skip
    fused = tuning.trial(ctx, tuning.FUSED_OPTIMIZER)
    compiled = tuning.trial(ctx, tuning.COMPILE)
    assert fused is not None and fused.speedup == 1.2  # not 0.4 / 0.01 = 40x
    assert compiled is not None and compiled.speedup == 1.08  # 1.2 x 0.9, through fused


def test_a_record_saved_before_paired_rounds_gives_its_ratio_of_medians() -> None:
    ctx = record(
        {"name": "eager", "status": "baseline", "step_seconds": 0.03, "settings": {}},
        {"name": "compile", "status": "slower", "step_seconds": 0.04,
         "settings": {"compile": True}},
    )  # fmt: skip
    found = tuning.trial(ctx, tuning.COMPILE)
    assert found is not None and round(found.speedup or 0, 2) == 0.75
