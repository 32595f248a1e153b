"""Ranks whose loaders differ in length train the shortest length on every rank, with the
reason, instead of a job that dies in gloo (issue 38, E12): two real processes under
torchrun on this CPU, an FSDP2 fit."""

from __future__ import annotations

import json

import pytest

from .torch_launch import ROOT, torchrun

pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.distributed]

WORKER = str(ROOT / "tests" / "distributed" / "torch_uneven_worker.py")


def test_uneven_loaders_train_the_shortest_length_on_every_rank(tmp_path) -> None:
    done = torchrun(WORKER, str(tmp_path), timeout=240)
    assert done.returncode == 0, done.explain()
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [rank["steps"] for rank in ranks] == [16, 16]  # 2 epochs of the shorter 8
    assert "rank 0: 16, rank 1: 8 batches an epoch" in done.stderr + done.stdout
