"""accelkit.torch.fit under torchrun: two real processes on this CPU, gloo backend.

python -m pytest tests/distributed -m distributed        # only these
python -m pytest tests -m "not distributed"              # everything else
"""

from __future__ import annotations

import json

import pytest

from .torch_launch import ROOT, WORKER, torchrun

pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.distributed]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Each rank's results of torch_worker.py train (one torchrun for the module)."""
    out = tmp_path_factory.mktemp("ddp")
    done = torchrun(WORKER, "train", str(out))
    assert done.returncode == 0, done.explain()
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    return ranks, done, out


def test_the_plan_started_a_gloo_process_group_with_the_timeout(trained) -> None:
    ranks, _, _ = trained
    for result in ranks:
        settings = {s["key"]: s for s in result["plan"]["settings"]}
        backend = settings["torch.distributed.backend"]
        assert backend["status"] == "applied"
        assert "backend=gloo, world size 2, timeout 30 s" in backend["detail"]
        assert result["plan"]["distribution"] == "ddp"


def test_each_rank_trains_on_half_the_data_and_the_loss_falls(trained) -> None:
    ranks, _, _ = trained
    for rank, result in enumerate(ranks):
        report = result["report"]
        # 1024 samples, batch 32: 32 batches per epoch in all, 16 on each of 2 ranks.
        assert report["facts"]["steps_per_epoch"] == 16 and report["steps"] == 2 * 16
        assert f"rank {rank} of 2 trains on 512 of 1024" in report["facts"]["sampler"]
        assert report["facts"]["distributed"] is True and report["facts"]["rank"] == rank
        assert report["losses"][-1] < 0.6 * report["losses"][0]
        assert report["model"] == "Sequential"  # the module, not the DDP wrapper
        assert report["flops_per_step"] > 0


def test_every_rank_returns_the_whole_runs_report(trained) -> None:
    ranks, _, _ = trained
    reports = [result["report"] for result in ranks]
    for report in reports:
        assert report["world_size"] == 2
        assert [r["rank"] for r in report["ranks"]] == [0, 1]
        per_rank = report["ranks"]
        assert report["global_samples_per_second"] == pytest.approx(
            sum(r["steady_samples"] for r in per_rank) / max(r["steady_seconds"] for r in per_rank)
        )
        # Ranks step together, so the global rate is close to the sum of the ranks' rates.
        total = sum(r["samples_per_second"] for r in per_rank)
        assert 0.7 * total <= report["global_samples_per_second"] <= total * 1.0001
        assert report["slowest_rank"] in (0, 1)
        assert report["scaling_efficiency"] is None
        assert "single_device=" in report["notes"]["scaling_efficiency"]
    assert reports[0]["ranks"] == reports[1]["ranks"]
    # Each rank's own figures stay its own.
    assert reports[0]["samples_per_second"] == reports[0]["ranks"][0]["samples_per_second"]
    assert reports[1]["samples_per_second"] == reports[1]["ranks"][1]["samples_per_second"]


def test_accumulation_reduces_only_on_optimizer_steps_and_replicas_stay_equal(trained) -> None:
    ranks, _, _ = trained
    for result in ranks:
        # 16 batches, accumulation 3: DDP all-reduces on batches 3, 6, 9, 12 and 15;
        # the leftover 16th is averaged by accelkit before the last optimizer step.
        assert result["reduced_steps"] == 5
        assert result["accumulated"]["steps"] == 16
    # The models started from different seeds on each rank; after training, both
    # the plain and the accumulated model are bit for bit the same on both ranks.
    plain, accumulated = zip(*ranks[0]["checksums"], strict=True)
    assert len(set(plain)) == 1 and len(set(accumulated)) == 1
    assert ranks[0]["checksums"] == ranks[1]["checksums"]


def test_only_rank_zero_prints_and_saves(trained) -> None:
    _, done, out = trained
    # Two fits, each printing progress once per window on rank 0 only.
    progress = [line for line in done.stderr.splitlines() if line.startswith("accelkit: step")]
    assert len(progress) == 2
    saved = json.loads((out / "saved.json").read_text())
    assert saved["facts"]["rank"] == 0 and saved["world_size"] == 2


def test_bench_compare_single_under_torchrun() -> None:
    done = torchrun(
        "-m",
        "accelkit",
        "bench",
        "--model",
        "mlp",
        "--framework",
        "torch",
        "--steps",
        "6",
        "--batch-size",
        "64",
        "--compare-single",
        "--json",
    )
    assert done.returncode == 0, done.explain()
    report = json.loads(done.stdout)  # one document: only rank 0 prints
    assert report["world_size"] == 2 and len(report["ranks"]) == 2
    assert report["single_device_samples_per_second"] > 0
    assert report["scaling_efficiency"] == pytest.approx(
        report["global_samples_per_second"] / (2 * report["single_device_samples_per_second"])
    )
    assert "alone on rank 0" in report["notes"]["single_device_samples_per_second"]
    assert report["batch_size"] == 64  # per device


def test_scaling_benchmark_script_runs_under_torchrun(tmp_path) -> None:
    out = tmp_path / "scaling.json"
    done = torchrun(
        str(ROOT / "benchmarks" / "scaling.py"),
        "--model",
        "gpt",
        "--steps",
        "4",
        "--batch-size",
        "2",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.explain()
    assert "scaling efficiency" in done.stdout and done.stdout.count("per-rank") == 1
    result = json.loads(out.read_text())
    assert result["world_size"] == 2 and len(result["ranks"]) == 2
    assert result["single_device"]["samples_per_second"] > 0
    assert result["scaling_efficiency"] > 0
    assert result["global"]["tokens_per_second"] == pytest.approx(
        result["global"]["samples_per_second"] * 256
    )


def test_tune_under_ddp_takes_rank_zeros_verdicts_on_every_rank(trained) -> None:
    ranks, _, _ = trained
    tunings = [result["tuned"]["tuning"] for result in ranks]
    assert all(t["decision"] == "tuned" for t in tunings)
    statuses = [[c["status"] for c in t["candidates"]] for t in tunings]
    assert statuses[0] == statuses[1] and tunings[0]["chosen"] == tunings[1]["chosen"]
    assert tunings[0]["optimizer"] == tunings[1]["optimizer"]
    # The same verdicts, so the same implementation on both ranks: the weights agree.
    checksums = ranks[0]["tuned"]["checksums"]
    assert checksums[0] == checksums[1]
