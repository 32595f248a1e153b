"""AccelkitCallback under Lightning's DDP: two torchrun processes on this CPU (gloo)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from ..distributed.torch_launch import torchrun

pytest.importorskip("torch")
pytest.importorskip("lightning")
pytestmark = [pytest.mark.torch, pytest.mark.distributed]

WORKER = str(Path(__file__).with_name("ddp_worker.py"))


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("lightning_ddp")
    done = torchrun(WORKER, str(out), timeout=180)
    assert done.returncode == 0, done.explain()
    return out, [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]


def test_trainer_kwargs_start_ddp_over_torchruns_processes(ranks) -> None:
    _, results = ranks
    for result in results:
        assert result["kwargs"] == {
            "precision": "32-true",
            "accelerator": "cpu",
            "devices": 2,
            "strategy": "ddp",
        }
        assert result["world_size"] == 2


def test_every_rank_holds_the_whole_runs_report(ranks) -> None:
    _, results = ranks
    reports = [result["report"] for result in results]
    for report in reports:
        # 512 samples in batches of 32: 16 batches, 8 on each rank (DistributedSampler).
        assert report["steps"] == 8
        assert report["world_size"] == 2
        assert [r["rank"] for r in report["ranks"]] == [0, 1]
        per_rank = report["ranks"]
        assert report["global_samples_per_second"] == pytest.approx(
            sum(r["steady_samples"] for r in per_rank) / max(r["steady_seconds"] for r in per_rank)
        )
        assert report["flops_per_step"] > 0
    assert reports[0]["ranks"] == reports[1]["ranks"]


def test_every_rank_reports_each_ranks_wait_for_the_all_reduce(ranks) -> None:
    _, results = ranks
    for result in results:
        report = result["report"]
        assert "communication_share" not in report["notes"]
        assert "host clock" in report["facts"]["communication"]["method"]  # gloo
        for figures in report["ranks"]:
            assert 0.0 <= figures["communication_s"] < figures["step_time_s"]
        hooked = result["hooked"]
        assert hooked["communication_share"] is None
        assert "has a hook already" in hooked["notes"]["communication_share"]


def test_only_rank_zero_logs_and_its_rows_carry_the_figures(ranks) -> None:
    out, _ = ranks
    (metrics,) = out.glob("run/version_*/metrics.csv")  # one logger wrote: rank 0's
    with metrics.open() as handle:
        rows = list(csv.DictReader(handle))
    logged = [row for row in rows if row.get("accelkit/samples_per_second")]
    assert logged
    assert all(float(row["accelkit/samples_per_second"]) > 0 for row in logged)
