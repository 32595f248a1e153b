"""`accelkit bench --project`: the run, then what it would do on other GPUs (the demo's
CPU GPT on an H200), with the estimate's assumptions; in a subprocess, on real PyTorch."""

from __future__ import annotations

import json
import subprocess

import pytest

from ..helpers.cli import accelkit as run_accelkit

pytestmark = pytest.mark.torch
BENCH = ("bench", "--model", "gpt", "--framework", "torch", "--steps", "4", "--batch-size", "2")


def accelkit(*args: str) -> subprocess.CompletedProcess[str]:
    return run_accelkit(*args, COLUMNS="100")


def test_the_compiled_run_is_projected_onto_an_h200_with_its_assumptions() -> None:
    # The demo's GPT at its own batch of 8, compiled as the demo runs it: eager, its host
    # would issue the ops slower than an H200 runs them (the next test).
    done = accelkit(*BENCH[:-2], "--compile", "--project", "H200")
    assert done.returncode == 0, done.stderr
    report, _, projection = done.stdout.partition("what-if projection")
    assert "accelkit run: torch, GPT on cpu" in report
    assert "NVIDIA H200" in projection and "not projected" not in projection
    assert "assumes: MFU 40.0% (assumed" in projection  # a CPU run's MFU says nothing of a GPU
    assert "bf16" in projection
    assert "host time launching kernels one by one" in projection  # the floor, with its count


def test_json_holds_the_projections_beside_the_report() -> None:
    # At a batch of 2 the eager GPT's kernels on an H200 (37 µs at 40% MFU, 81 µs of
    # launches) take less time than its host issuing them (90 ops x 9.3 µs): no figure,
    # the reason and the floor instead.
    done = accelkit(*BENCH, "--project", "H200:8", "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)  # one document, nothing else on stdout
    [h200] = document["projections"]
    assert h200["key"] == "h200-sxm" and h200["count"] == 8 and h200["rank_by_time"] is None
    assert h200["projected"] is False and h200["reason"].startswith("host-bound")
    assert "an eager PyTorch host takes to issue its 90 ops" in h200["reason"]
    assert h200["floor_s"] >= 90 * 9.3e-6


def test_an_unknown_gpu_exits_1_before_the_run() -> None:
    done = accelkit(*BENCH, "--project", "Voodoo 5")
    assert done.returncode == 1
    assert "accelkit run" not in done.stdout and "step 1/" not in done.stderr
