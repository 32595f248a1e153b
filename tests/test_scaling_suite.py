"""benchmarks/scaling_suite.py: which runs, in what order, with which arguments, and
the table it writes (no run here; tests/distributed runs benchmarks/scaling.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import scaling_suite


def names(*argv: str) -> list[str]:
    args = scaling_suite._arguments(["--out", "/tmp/x", *argv])
    return [c["name"] for c in scaling_suite.configurations(args)]


def test_the_targets_runs_come_first_eager_before_compiled() -> None:
    runs = names()
    assert runs[:3] == [
        "resnet50_b64_eager_off",
        "resnet50_b64_eager_on",
        "resnet50_b64_eager_off_untimed",
    ]
    assert runs[3:5] == ["gpt2_b16_eager_off", "gpt2_b16_eager_on"]
    assert runs.index("gpt2_b32_eager_on") < runs.index("hook_overhead_resnet50_b64")
    assert runs.index("hook_overhead_resnet50_b64") < runs.index("resnet50_b64_compiled_off")
    # 4 groups x 2 modes x off/on, the untimed control and the hook's cost
    assert len(runs) == 18
    assert all("compiled" in run for run in names("--only", "compiled"))


def test_each_run_is_its_own_torchrun_with_the_groups_single_device_figure() -> None:
    args = scaling_suite._arguments(["--out", "/tmp/x", "--gpus", "4"])
    config = next(
        c for c in scaling_suite.configurations(args) if c["name"] == "gpt2_b32_compiled_on"
    )
    line = scaling_suite.command(config, args, single=512.5)
    assert line[:5] == ["-m", "torch.distributed.run", "--nproc-per-node", "4", "--standalone"]
    for flag in (
        ["--levers", "on"],
        ["--batch-size", "32"],
        ["--single-device", "512.5"],
        ["--steps", "110"],
    ):
        assert " ".join(flag) in " ".join(line)
    assert "--compile" in line and "--json" in line and "--tune" in line


@pytest.mark.parametrize("timed", [True, False])
def test_the_table_gives_each_configuration_or_why_not(timed) -> None:
    base = {"model": "resnet50", "batch": 64, "mode": "eager", "levers": "off", "timed": timed}
    done = {
        **base,
        "world_size": 4,
        "single_device_samples_per_second": 2448.0,
        "global_samples_per_second": 7496.0,
        "scaling_efficiency": 0.7655,
        "step_ms": 34.15,
        "all_reduce_wait_share": [0.02, 0.03] if timed else [],
        "tune_kept": None,
    }
    table = scaling_suite.markdown([done, {**base, "skipped": "budget of 480 s spent"}])
    assert "| resnet50 | 64 | eager | off" in table and "| 76.5% | 34.15 |" in table
    assert ("2.0%-3.0%" if timed else "not timed") in table
    assert "budget of 480 s spent" in table


def test_the_hooks_cost_runs_its_own_script() -> None:
    args = scaling_suite._arguments(["--out", "/tmp/x"])
    config = next(c for c in scaling_suite.configurations(args) if c["levers"] == "overhead")
    line = " ".join(scaling_suite.command(config, args, single=None))
    assert "comm_hook_overhead.py --model resnet50 --batch-size 64 --steps 30 --repeats 3" in line
    assert line.endswith("--channels-last")  # as fit trains a conv net
