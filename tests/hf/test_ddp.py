"""AccelkitCallback under the Hugging Face Trainer's DDP: two torchrun processes on this
CPU (gloo); the Trainer starts the group and wraps the model itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ..distributed.torch_launch import torchrun

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate", reason="the Trainer needs accelerate")
pytestmark = [pytest.mark.torch, pytest.mark.distributed]

WORKER = str(Path(__file__).with_name("ddp_worker.py"))


def test_every_rank_reports_each_ranks_wait_for_the_all_reduce(tmp_path) -> None:
    done = torchrun(WORKER, str(tmp_path), timeout=240)
    assert done.returncode == 0, done.explain()
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for rank, report in enumerate(reports):
        assert report["world_size"] == 2 and [r["rank"] for r in report["ranks"]] == [0, 1]
        assert "communication_share" not in report["notes"]
        assert "host clock" in report["facts"]["communication"]["method"]  # gloo
        for figures in report["ranks"]:
            assert 0.0 <= figures["communication_s"] < figures["step_time_s"]
        assert report["communication_s"] == report["ranks"][rank]["communication_s"]
