"""The gradient all-reduce timing on CUDA in a real two-process run: CUDA events at each
bucket's launch and completion, read at the meter's window boundaries. Two torchrun
ranks share the one GPU over gloo (tests/distributed/torch_comm_gpu_worker.py); the
CPU counterpart is test_torch_communication.py."""

from __future__ import annotations

import json

import pytest

from .torch_launch import ROOT, torchrun

pytest.importorskip("torch")

pytestmark = [pytest.mark.torch, pytest.mark.distributed, pytest.mark.gpu]

WORKER = str(ROOT / "tests" / "distributed" / "torch_comm_gpu_worker.py")
LEVERS = ("+bf16-grads", "+buckets-100MB", "+static-graph", "+no-buffer-broadcast")


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("comm_gpu")
    done = torchrun(WORKER, str(out), timeout=600)
    assert done.returncode == 0, done.explain()
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]


def test_each_rank_times_its_all_reduce_with_cuda_events(ranks) -> None:
    for result in ranks:
        report = result["timed"]["report"]
        assert report["world_size"] == 2 and len(report["ranks"]) == 2
        communication = report["facts"]["communication"]
        assert "CUDA events" in communication["method"]
        assert communication["all_reduces"] >= 1 and communication["hook_host_us"] > 0
        for figures in report["ranks"]:
            assert 0.0 <= figures["communication_s"] < figures["step_time_s"]
            assert figures["communication_s"] <= figures["all_reduce_in_flight_s"] + 1e-6
        assert "communication_share" not in report["notes"]


def test_the_timed_hook_trains_exactly_as_plain_ddp_on_the_gpu(ranks) -> None:
    for result in ranks:
        assert result["plain"]["checksum"] == result["timed"]["checksum"]
        assert result["plain"]["losses"] == result["timed"]["report"]["losses"]


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_tune_tries_every_lever_and_the_ranks_agree(ranks, mode) -> None:
    tuned = [result[mode] for result in ranks]
    for run in tuned:
        found = run["tuning"]["candidates"]
        for lever in LEVERS:  # each tried: its step time, or why it failed
            trial = next(c for c in found if c["name"].endswith(lever))
            assert trial["status"] in ("chosen", "slower", "failed"), trial
            assert trial["why"], trial
        assert run["communication_share"] is not None, run["notes"]
    assert [c["status"] for c in tuned[0]["tuning"]["candidates"]] == [
        c["status"] for c in tuned[1]["tuning"]["candidates"]
    ]
    assert tuned[0]["ddp"] == tuned[1]["ddp"]
    assert len(set(tuned[0]["checksums"])) == 1  # the replicas stay equal
    if tuned[0]["ddp"]["broadcast_buffers"] is False:  # the fit's end gave rank 0's to all
        assert len(set(tuned[0]["buffers"])) == 1
