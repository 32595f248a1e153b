"""The `fused_optimizer` rule on plain data: a GPU run whose optimizer walks its
parameter tensors one by one, or uses foreach where a fused kernel exists."""

from __future__ import annotations

import pytest

from accelkit import what_if
from accelkit.advisor import Severity
from accelkit.advisor.context import Context
from accelkit.advisor.rules import optimizer
from accelkit.hardware.info import HardwareInfo

from .helpers import measured_on

H200 = what_if("H200")
CPU = HardwareInfo(source="cpu")


def opt(implementation, *, fused=True, foreach=True, by_user=False, tensors=148, kind="AdamW"):
    return {
        "type": kind,
        "implementation": implementation,
        "foreach_available": foreach,
        "fused_available": fused,
        "set_by_user": by_user,
        "parameter_tensors": tensors,
        "param_groups": 1,
    }


def verdict(facts, hardware=H200, **figures):
    m = measured_on(hardware, facts=facts, **figures)
    return optimizer.fused_optimizer(Context.build(hardware, None, m))


def test_a_for_loop_optimizer_on_a_gpu_is_pointed_at_fused_with_its_tensor_count() -> None:
    found = verdict({"optimizer": opt("for-loop", by_user=True)})
    assert found.id == "fused_optimizer" and found.severity is Severity.INFO
    assert "AdamW runs its for-loop implementation" in found.title
    assert "148 parameter tensors, each updated by its own kernels" in found.title
    assert found.action.startswith("torch.optim.AdamW(model.parameters(), ..., fused=True)")
    assert "the script sets fused/foreach itself" in found.action
    assert found.evidence["optimizer.parameter_tensors"] == 148
    assert found.speedup is None and found.expected_gain.startswith("not estimated")
    assert "148 tensors" in found.expected_gain and "tune=True" in found.expected_gain


def test_foreach_where_fused_is_available_is_info() -> None:
    found = verdict({"optimizer": opt("foreach")})
    assert found.severity is Severity.INFO and "fused is available" in found.title
    assert "fused=True" in found.action


def test_an_optimizer_with_foreach_only_is_told_foreach_and_its_memory_cost() -> None:
    found = verdict(
        {"optimizer": opt("for-loop", fused=False, kind="RMSprop"), "parameter_bytes": 500 * 2**20}
    )
    assert found.action.startswith("torch.optim.RMSprop(model.parameters(), ..., foreach=True)")
    assert "sizeof(params) (500 MiB here) more peak memory" in found.action


@pytest.mark.parametrize(
    "facts",
    [
        {"optimizer": opt("fused")},  # already fused
        {"optimizer": opt("foreach", fused=False)},  # foreach, nothing faster to offer
        {"optimizer": opt("for-loop", fused=False, foreach=False, kind="LBFGS")},  # no option
        {"optimizer": {"type": "ZeroRedundancyOptimizer"}},  # not a torch.optim optimizer
        {},  # a hand-written loop that did not pass the optimizer
    ],
)
def test_quiet_without_a_faster_implementation_to_offer(facts) -> None:
    assert verdict(facts) is None


def test_quiet_off_the_gpu_and_for_keras() -> None:
    assert verdict({"optimizer": opt("for-loop")}, CPU) is None
    assert verdict({"optimizer": opt("for-loop")}, framework="tensorflow") is None


def trial_record(fused_status, fused_step, chosen="eager"):
    return {
        "decision": "tuned",
        "baseline": "eager",
        "chosen": chosen,
        "candidates": [
            {
                "name": "eager",
                "settings": {"compile": False, "optimizer": "default"},
                "status": "baseline",
                "step_seconds": 0.0500,
                "why": "",
            },
            {
                "name": "eager+fused",
                "settings": {"compile": False, "optimizer": "fused"},
                "status": fused_status,
                "step_seconds": fused_step,
                "why": "",
            },
        ],
    }


def test_a_tune_trial_of_the_fused_optimizer_gives_the_measured_gain() -> None:
    found = verdict(
        {"optimizer": opt("for-loop", by_user=True)}, tuning=trial_record("skipped", 0.0440)
    )
    assert found.severity is Severity.WARNING
    assert found.speedup == pytest.approx(0.0500 / 0.0440)
    assert "ran 1.14x faster in tune's 'eager+fused' trial" in found.title
    assert found.expected_gain.startswith("measured 1.14x: 50.00 ms / 44.00 ms 'eager+fused'")


def test_a_fused_optimizer_measured_slower_or_kept_is_not_advised() -> None:
    facts = {"optimizer": opt("foreach")}
    assert verdict(facts, tuning=trial_record("slower", 0.0510)) is None
    assert verdict(facts, tuning=trial_record("chosen", 0.0440, chosen="eager+fused")) is None
