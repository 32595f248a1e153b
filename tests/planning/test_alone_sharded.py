"""One GPU whose plan shards the model with FSDP2 (CPU offload where that is what fits):
the trainers' helpers have no setting for it, and say so with the numbers instead of
handing back a single-device configuration without a word (issue 37, E05)."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import accelkit
from accelkit.planning.sharding import alone_sharded


def test_training_arguments_and_trainer_kwargs_say_the_replica_does_not_fit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pytest.importorskip("transformers")
    lightning = pytest.importorskip("lightning")
    import accelkit.hf
    import accelkit.lightning

    plan = accelkit.plan_for("H100", params=8e9)
    assert plan.memory is not None and plan.memory.choice == "fsdp2+offload"
    with caplog.at_level(logging.WARNING, logger="accelkit"):
        accelkit.hf.training_arguments(plan)
        accelkit.lightning.trainer_kwargs(plan, model=lightning.LightningModule())
    said = [r.getMessage() for r in caplog.records]
    for helper in ("training_arguments", "trainer_kwargs"):
        line = next(m for m in said if f"{helper}(plan)" in m)
        assert "FSDP2 and CPU offload on one GPU" in line
        assert "128.00 GB where 71.10 GB is usable" in line


@settings(max_examples=30, deadline=None)
@given(st.integers(10**8, 2 * 10**10), st.sampled_from(["H100", "A100-SXM4-80GB", "L4"]))
def test_only_a_plan_that_shards_one_gpu_is_flagged(params: int, gpu: str) -> None:
    plan = accelkit.plan_for(gpu, params=params)
    flagged = alone_sharded(plan, "training_arguments") is not None
    assert flagged == (plan.value("sharding") == "fsdp2")
