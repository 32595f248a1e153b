"""Failure paths of a PyTorch data-parallel run: each ends in time, with a clear message.

- a rank that dies mid-training: torchrun stops the others and exits non-zero,
  naming the failed rank;
- a rank that hangs: the others fail their all-reduce after ACCELKIT_DIST_TIMEOUT;
- the master port already in use: torchrun fails at once, naming the port;
- a world size that never fills (WORLD_SIZE=2, one process): the rendezvous
  gives up after ACCELKIT_DIST_TIMEOUT, auto_configure marks the process group
  "could not apply" with the reason, and fit trains the process alone, saying so.
"""

from __future__ import annotations

import json
import socket
import sys

import pytest

from .torch_launch import WORKER, environment, free_port, run, torchrun

pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.distributed]


def test_a_rank_that_dies_stops_the_run_and_is_named(tmp_path) -> None:
    done = torchrun(WORKER, "die", str(tmp_path), timeout=60)
    assert done.returncode != 0
    assert "Boom: rank 1 fails on purpose at step 3" in done.stderr  # the error, unchanged
    root_cause = done.stderr.split("Root Cause", 1)[-1]
    assert "rank      : 1 (local_rank: 1)" in root_cause
    assert done.seconds < 60


def test_a_rank_that_hangs_times_the_others_out_instead_of_hanging(tmp_path) -> None:
    done = torchrun(WORKER, "hang", str(tmp_path), timeout=60, ACCELKIT_DIST_TIMEOUT="5")
    assert done.returncode != 0
    # Rank 0 waits in the all-reduce for ACCELKIT_DIST_TIMEOUT, then fails; torchrun
    # stops the sleeping rank 1.
    assert "Timed out waiting 5000ms" in done.stderr
    assert "rank      : 0 (local_rank: 0)" in done.stderr.split("Root Cause", 1)[-1]
    assert done.seconds < 45


def test_a_master_port_in_use_is_a_clear_error_not_a_hang(tmp_path) -> None:
    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        done = torchrun(WORKER, "train", str(tmp_path), port=port, timeout=60)
    assert done.returncode != 0
    assert "EADDRINUSE" in done.stderr and str(port) in done.stderr
    assert done.seconds < 30
    assert not list(tmp_path.iterdir())  # no worker started


def test_a_world_size_that_never_fills_trains_alone_after_the_timeout(tmp_path) -> None:
    env = environment(
        WORLD_SIZE="2",
        RANK="0",
        LOCAL_RANK="0",
        LOCAL_WORLD_SIZE="2",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
        ACCELKIT_DIST_TIMEOUT="3",
    )
    done = run([sys.executable, WORKER, "alone", str(tmp_path)], env, timeout=60)
    assert done.returncode == 0, done.explain()
    assert done.seconds < 40
    result = json.loads((tmp_path / "rank0.json").read_text())
    setting = next(s for s in result["plan"]["settings"] if s["key"] == "torch.distributed.backend")
    assert setting["status"] == "could not apply"
    detail = setting["detail"]
    assert "did not start within 3 s (ACCELKIT_DIST_TIMEOUT)" in detail
    assert "1/2 clients joined" in detail and "WORLD_SIZE=2" in detail
    # fit says so on stderr and in the report, and trains the whole data set alone.
    assert "accelkit: trained this process alone, without DistributedDataParallel" in done.stderr
    report = result["report"]
    assert report["world_size"] == 1 and report["steps"] == 2 * 32
    assert "did not start within 3 s" in report["notes"]["world_size"]
    assert report["losses"][-1] < report["losses"][0]
