"""The gradient all-reduce of accelkit.torch.fit under torchrun: timed per rank, the
same numbers as plain DDP, and the DDP levers tune measures. Two real processes on
this CPU, gloo backend (tests/distributed/torch_comm_worker.py)."""

from __future__ import annotations

import json

import pytest

from .torch_launch import ROOT, torchrun

pytest.importorskip("torch")

from accelkit.torch.distributed.communication import FIRST_PASSES, SAMPLE_EVERY

pytestmark = [pytest.mark.torch, pytest.mark.distributed]

WORKER = str(ROOT / "tests" / "distributed" / "torch_comm_worker.py")
GRADIENT_BYTES = 71_172 * 4  # the worker's 16 -> 256 -> 256 -> 4 MLP in fp32


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("comm")
    done = torchrun(WORKER, str(out), timeout=240)
    assert done.returncode == 0, done.explain()
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)], out


def test_every_rank_reports_each_ranks_wait_for_the_all_reduce(ranks) -> None:
    results, _ = ranks
    for rank, result in enumerate(results):
        report = result["timed"]["report"]
        assert report["world_size"] == 2 and len(report["ranks"]) == 2
        for figures in report["ranks"]:
            assert 0.0 <= figures["communication_s"] < figures["step_time_s"]
            assert 0.0 <= figures["communication_share"] < 1.0
            assert figures["communication_s"] <= figures["all_reduce_in_flight_s"] + 1e-9
        own = report["ranks"][rank]
        assert report["communication_s"] == own["communication_s"]  # its own, as samples/s
        communication = report["facts"]["communication"]
        assert communication["gradient_bytes"] == GRADIENT_BYTES
        assert communication["sent_bytes"] == GRADIENT_BYTES  # fp32: nothing compressed
        assert communication["buckets"] >= 1
        # one all-reduce a step; the first passes and then one in 20 are timed
        warmup = report["steps"] - report["steady_steps"]
        timed = [
            n
            for n in range(warmup + 1, report["steps"] + 1)
            if n <= FIRST_PASSES or n % SAMPLE_EVERY == 0
        ]
        assert communication["all_reduces"] == len(timed)
        assert "host clock" in communication["method"]
        assert communication["hook_host_us"] > 0
        assert report["facts"]["ddp"]["gradient_as_bucket_view"] is True
        assert "communication_share" not in report["notes"]


def test_the_saved_report_keeps_the_figures_and_the_text_shows_them(ranks) -> None:
    import accelkit

    _, out = ranks
    report = accelkit.RunReport.load(out / "timed.json")  # validated field by field
    assert [r["rank"] for r in report.ranks] == [0, 1]
    assert report.communication_share is not None
    text = str(report)
    assert "all-reduce wait" in text and "rank 0 " in text and "rank 1 " in text


def test_the_timed_hook_and_bucket_views_train_exactly_as_plain_ddp(ranks) -> None:
    results, _ = ranks
    for result in results:
        plain, timed = result["plain"], result["timed"]
        assert plain["checksum"] == timed["checksum"]  # bit for bit
        assert plain["losses"] == timed["report"]["losses"]
        assert plain["communication_share"] is None
        assert plain["notes"]["communication_share"] == "ACCELKIT_COMM_TIMING=0: not timed"


def test_tune_measures_bf16_gradients_and_keeps_or_drops_them_with_the_reason(ranks) -> None:
    results, _ = ranks
    tuned = [result["tuned"] for result in results]
    candidates = [t["tuning"]["candidates"] for t in tuned]
    for found in candidates:
        # the optimizer's trial comes first: its name is in theirs when it won
        bf16, buckets, static = (
            next(c for c in found if c["name"].endswith(lever))
            for lever in ("+bf16-grads", "+buckets-100MB", "+static-graph")
        )
        assert bf16["settings"]["compression"] == "bf16" and bf16["steps"] >= 10
        assert bf16["status"] in ("chosen", "slower")
        assert bf16["why"]  # the speed-up it gave, or why it was not kept
        assert buckets["settings"]["bucket_cap_mb"] == 100
        assert static["settings"]["static_graph"] is True
    # rank 0's verdicts hold on every rank, and the replicas stay equal
    assert [c["status"] for c in candidates[0]] == [c["status"] for c in candidates[1]]
    assert tuned[0]["ddp"] == tuned[1]["ddp"]
    assert len(set(tuned[0]["checksums"])) == 1
    for result in results:  # bf16 past a tolerance no bf16 all-reduce meets: dropped
        strict = result["strict"]["tuning"]["candidates"]
        bf16 = next(c for c in strict if c["name"].endswith("+bf16-grads"))
        assert bf16["status"] == "failed"
        assert bf16["why"].startswith("bf16 gradients differ from fp32 by ")
        assert result["strict"]["ddp"]["compression"] == "none"
        assert len(set(result["strict"]["checksums"])) == 1


def test_ddp_options_the_script_gives_are_kept_and_not_tuned(ranks) -> None:
    results, _ = ranks
    given = results[0]["given"]
    assert given["ddp"]["bucket_cap_mb"] == 1 and given["ddp"]["static_graph"] is True
    skipped = {
        c["name"]: c["why"] for c in given["tuning"]["candidates"] if c["status"] == "skipped"
    }
    assert skipped["buckets-100MB"] == "bucket_cap_mb was set by the script"
    assert "static_graph" in skipped["static-graph"]
    assert "the plan trains in fp32" in skipped["bf16-grads"]


def test_tune_tries_stopping_the_buffer_broadcast_only_where_it_cannot_change_training(
    ranks,
) -> None:
    results, _ = ranks
    for result in results:
        trials = {
            key: next(
                c for c in result[key]["tuning"]["candidates"] if "no-buffer-broadcast" in c["name"]
            )
            for key in ("bn", "counter", "tuned")
        }
        # BatchNorm's running statistics: tried, on top of the best so far
        assert trials["bn"]["status"] in ("chosen", "slower")
        assert trials["bn"]["settings"]["broadcast_buffers"] is False
        assert result["bn"]["ddp"]["buffers"] == 3  # running mean, variance, batches tracked
        # a buffer the forward changes outside a normalisation layer: dropped, with why
        assert trials["counter"]["status"] == "failed"
        assert trials["counter"]["why"].startswith("buffer 'seen' changed during training")
        assert result["counter"]["ddp"]["broadcast_buffers"] is True
        assert len(set(result["counter"]["buffers"])) == 1  # broadcast again: equal
        assert trials["tuned"]["why"] == "the model has no buffers: DDP broadcasts none"
        if trials["bn"]["status"] == "chosen":  # the fit's end gave every rank rank 0's
            assert len(set(result["bn"]["buffers"])) == 1
    # a fit that kept the broadcast off ends with rank 0's buffers on every rank
    assert [r["finished"]["mean"] for r in results] == [0.0, 0.0]
    assert len(set(results[0]["finished"]["buffers"])) == 1


def test_a_model_the_script_hooked_keeps_its_hook_untimed(ranks) -> None:
    results, _ = ranks
    hooked = results[0]["hooked"]
    assert "has a communication hook already" in hooked["notes"]["communication_share"]
    assert hooked["ddp"] == {"wrapped_by": "the script"}


def test_the_scaling_benchmark_runs_one_lever_configuration_and_prints_json(tmp_path) -> None:
    done = torchrun(
        str(ROOT / "benchmarks" / "scaling.py"),
        "--model",
        "mlp",
        "--batch-size",
        "16",
        "--steps",
        "8",
        "--warmup",
        "2",
        "--levers",
        "off",
        "--bf16-grads",
        "--json",
        "--out",
        str(tmp_path / "run.json"),
    )
    assert done.returncode == 0, done.explain()
    result = json.loads(done.stdout.strip().splitlines()[-1])  # one line: rank 0's
    assert result == json.loads((tmp_path / "run.json").read_text())
    assert result["levers"] == "off" and result["world_size"] == 2
    assert result["ddp"]["gradient_as_bucket_view"] is False
    assert result["ddp"]["compression"] == "bf16"
    sent = result["communication"]
    assert sent["sent_bytes"] * 2 == sent["gradient_bytes"]  # bf16 halves the bytes
    assert all(r["communication_s"] is not None for r in result["ranks"])
    assert "all-reduce wait" in done.stderr  # the table goes to stderr with --json
