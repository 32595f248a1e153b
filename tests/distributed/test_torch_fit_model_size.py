"""The README's two lines under torchrun, for a model too big for the GPUs the plan is
for: a plan without the model's size (as `auto_configure()` gives) and
`accelkit.torch.fit`. The fit plans the layout from the model before preparing it, so
the model is sharded with FSDP2 where the plan alone said DDP (a whole replica per GPU,
out of memory at the first step); a plan that carries an estimate is followed as it is.

Two real processes on this CPU (gloo), a what-if plan for 2 H100s of 1.02 GB each
(torch_model_size_worker.py says why the model does not fit them whole). Tolerance: the
sharded run's loss of each step is the DDP run's within 1e-5 relative (both bf16 on the
H100 plan; measured equal to the bit: the model is Linear layers and GELUs, so FSDP2's
gathered bf16 weights are autocast's bf16 casts, and a sum of two ranks' gradients has
one order; the bound leaves room for another reduction order).
"""

from __future__ import annotations

import math

import pytest

from .torch_launch import ROOT, ranks_written

pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.distributed]

WORKER = str(ROOT / "tests" / "distributed" / "torch_model_size_worker.py")


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    return ranks_written(tmp_path_factory.mktemp("model_size"), WORKER, timeout=240)


def test_a_plan_without_a_size_shards_a_model_too_big_for_a_replica(ranks) -> None:
    for rank, result in enumerate(ranks):
        unsized = result["unsized"]
        report = unsized["report"]
        assert unsized["first_type"] == "DTensor" and unsized["first_local_share"] == 0.5
        assert report["world_size"] == 2 and report["facts"]["rank"] == rank
        assert report["facts"]["sharding"]["kind"] == "fsdp2"
        assert report["facts"]["sharding"]["one_process"] is False  # the 2 ranks' group
        assert report["plan"]["distribution"] == "fsdp"
        assert report["plan"]["memory"]["params"] == unsized["parameters"]
        assert report["facts"]["memory_choice"] == "fsdp2"
        count = f"{unsized['parameters']:,}"
        assert f"planned from the model's {count} parameters" in report["notes"]["layout"]


def test_a_plan_with_an_estimate_does_what_the_estimate_says(ranks) -> None:
    for result in ranks:
        estimated = result["estimated"]
        report = estimated["report"]
        assert report["plan"]["memory"]["params"] == 1_000
        assert report["facts"]["memory_choice"] == "ddp"
        assert estimated["first_type"] == "Parameter"  # a whole replica, in DDP
        assert "sharding" not in report["facts"] and "layout" not in report["notes"]
        assert report["facts"]["distributed"] is True and report["world_size"] == 2


def test_the_sharded_fit_trains_as_the_ddp_fit(ranks) -> None:
    sharded, replicated = ranks[0]["unsized"]["losses"], ranks[0]["estimated"]["losses"]
    assert len(sharded) == len(replicated) == 8  # 256 samples, 16 a batch, 2 ranks
    assert all(math.isfinite(loss) for loss in sharded)
    assert sharded == pytest.approx(replicated, rel=1e-5)
    assert sharded[-1] < 0.8 * sharded[0]  # it learned: equal losses are not equal stalls
