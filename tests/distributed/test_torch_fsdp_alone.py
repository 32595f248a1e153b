"""accelkit.torch.fit shards with FSDP2 when the plan says so and no process group of
several ranks exists (one GPU whose plan offloads the state; torchrun with one rank):
it starts a process group of this one process (D23). On this CPU (gloo), fp32: the
sharded fit at world size 1 reduces nothing, so its losses equal the unsharded fit's
(within 1e-6 relative: FSDP2's flat all-gather buffers change no arithmetic)."""

from __future__ import annotations

import json
import sys

import pytest

from .torch_launch import ROOT, environment, run, torchrun

pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.distributed]

WORKER = str(ROOT / "tests" / "distributed" / "torch_fsdp_alone_worker.py")


def _check(out) -> None:
    result = json.loads((out / "alone.json").read_text())
    assert result["dtensor"] == "DTensor" and result["world_size"] == 1
    sharding = result["report"]["facts"]["sharding"]
    assert sharding["one_process"] is True and sharding["count"] == 4
    assert "sharding" not in result["report"]["notes"]
    assert result["losses"] == pytest.approx(result["single"], rel=1e-6)
    assert result["single"][-1] < 0.6 * result["single"][0]  # it learned


def test_a_process_without_a_launcher_shards_alone(tmp_path) -> None:
    done = run([sys.executable, WORKER, str(tmp_path)], environment(), timeout=240)
    assert done.returncode == 0, done.explain()
    _check(tmp_path)


def test_torchrun_with_one_rank_shards(tmp_path) -> None:
    done = torchrun(WORKER, str(tmp_path), nproc=1, timeout=240)
    assert done.returncode == 0, done.explain()
    _check(tmp_path)
