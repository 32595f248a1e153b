"""What-if projections: plain-data reports, a real CPU run, and the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import accelkit
from accelkit import what_if
from accelkit.advisor.context import DEFAULT_MFU
from accelkit.advisor.projection import (
    EAGER_DISPATCH_S,
    LAUNCH_GAP_S,
    NotProjected,
    project,
    ranked,
)
from accelkit.hardware.info import HardwareInfo
from accelkit.planning import Request, plan
from accelkit.profiling.run_report import RunReport
from accelkit.report.render import render_projections as render

SRC = os.path.join(os.path.dirname(__file__), "..", "..", "src")
A100 = what_if("A100-SXM4-80GB")

CPU_RUN = {
    "framework": "torch",
    "device": "cpu",
    "flops_per_step": 3.12e12,
    "batch_size": 32,
    "steps": 100,
    "matmul_dtype": "fp32",
    "facts": {"steps_per_epoch": 400},
}
GPU_RUN = {
    "framework": "torch",
    "device": "cuda:0 NVIDIA A100-SXM4-80GB",
    "mfu": 0.5,
    "flops_per_step": 3.12e12,
    "batch_size": 32,
    "steps": 100,
    "matmul_dtype": "bf16",
    "hardware": A100.to_dict(),
    "facts": {"steps_per_epoch": 400, "parameters": 125_000_000},
}


def test_step_time_is_flops_over_mfu_times_the_datasheet_peak() -> None:
    p = project(GPU_RUN, "A100-SXM4-80GB")
    assert p.mfu == 0.5 and "measured" in p.mfu_source and p.dtype == "bf16"
    assert p.step_time_s == pytest.approx(3.12e12 / (0.5 * 312e12))  # 20 ms
    assert p.epoch_time_s == pytest.approx(400 * p.step_time_s)
    assert p.samples_per_second == pytest.approx(32 / p.step_time_s)
    h100 = project(GPU_RUN, "H100 SXM")
    assert h100.step_time_s == pytest.approx(3.12e12 / (0.5 * 989.4e12), rel=1e-3)


def test_measured_input_wait_is_kept_and_the_mfu_excludes_it() -> None:
    # 40 ms steps, 10 ms of them waiting: MFU 3.12e12 / (0.040 s x 312e12) = 25% overall,
    # 33% over the 30 ms of compute.
    waiting = dict(GPU_RUN, input_wait_share=0.25, step_time_s=0.040, mfu=0.25)
    same = project(waiting, "A100-SXM4-80GB")
    assert same.mfu == pytest.approx(1 / 3) and "(without input wait): 25.0% x 1.333" in (
        same.mfu_source
    )
    assert same.input_wait_s == pytest.approx(0.010)
    assert same.step_time_s == pytest.approx(0.040)  # the same GPU gives back the run
    faster = project(waiting, "H100 SXM")
    assert faster.step_time_s == pytest.approx(3.12e12 / (989.4e12 / 3) + 0.010, rel=1e-3)
    assert any("waiting for input, as measured" in a for a in faster.assumptions)
    assert "input wait" in str(faster)


def test_several_gpus_split_the_epoch_and_multiply_the_cost() -> None:
    one = project(GPU_RUN, "H100 SXM", 1, price_per_hour=3.0)
    eight = project(GPU_RUN, "H100 SXM", 8, price_per_hour=3.0)
    # 500 MB of float32 gradients, 2 x 7/8 of them over NVLink at 450 GB/s each way: 1.9 ms,
    # hidden behind the 4.2 ms of backward (2/3 of the 6.3 ms of compute)
    assert eight.allreduce_s == pytest.approx(2 * 7 / 8 * 125e6 * 4 / 450e9)
    assert eight.exposed_allreduce_s == 0.0 and one.allreduce_s == 0.0
    assert eight.step_time_s == pytest.approx(one.step_time_s)
    assert eight.epoch_time_s == pytest.approx(one.epoch_time_s / 8)
    assert eight.cost_per_epoch == pytest.approx(one.cost_per_epoch)
    assert one.cost_per_epoch == pytest.approx(one.epoch_time_s / 3600 * 3.0)
    assert any("ring all-reduce of 500 MB" in a and "NVLink" in a for a in eight.assumptions)


def test_a_cpu_run_projects_at_an_assumed_mfu_with_the_targets_plan() -> None:
    p = project(CPU_RUN, "A100-SXM4-80GB")
    assert p.mfu == DEFAULT_MFU and "assumed" in p.mfu_source
    assert p.dtype == "bf16" and "accelkit's plan" in " ".join(p.assumptions)
    assert p.step_time_s == pytest.approx(3.12e12 / (DEFAULT_MFU * 312e12))
    assert project(CPU_RUN, "A100-SXM4-80GB", mfu=0.2).step_time_s == pytest.approx(
        2 * p.step_time_s
    )
    assert project(CPU_RUN, "Tesla T4").dtype == "fp16"
    assert project(CPU_RUN, "A100-SXM4-80GB", precision="fp32").dtype == "fp32"
    text = str(p)
    assert "MFU 40.0% (assumed" in text and "400 steps" in text


def test_a_bf16_run_projected_to_a_gpu_without_bf16_uses_its_plan() -> None:
    p = project(GPU_RUN, "Tesla T4")
    assert p.dtype == "fp16" and "no bf16 path" in " ".join(p.assumptions)


def test_keras_replicas_count_as_devices() -> None:
    facts = {"steps_per_epoch": 400, "devices_used": 2, "batch_size": 64, "parameters": 1e6}
    mirrored = dict(GPU_RUN, facts=facts)
    p = project(mirrored, "A100-SXM4-80GB", 2)
    assert p.flops_per_step == pytest.approx(3.12e12 / 2)
    assert p.steps_per_epoch == pytest.approx(400)  # same devices: same steps per epoch


def test_without_steps_per_epoch_the_run_is_the_epoch_and_says_so() -> None:
    p = project(dict(CPU_RUN, facts={}), "A100-SXM4-80GB")
    assert p.steps_per_epoch == 100 and "measured run's 100 steps" in " ".join(p.assumptions)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"gpu": "NVIDIA H2000"}, accelkit.UnknownGPUError),
        ({"gpu": "A100-SXM4-80GB", "count": 0}, ValueError),
        ({"gpu": "A100-SXM4-80GB", "mfu": 1.5}, ValueError),
        ({"gpu": "Tesla T4", "precision": "bf16"}, ValueError),
    ],
)
def test_bad_arguments_raise(kwargs, error) -> None:
    with pytest.raises(error):
        project(CPU_RUN, **kwargs)


def test_a_report_without_flops_is_not_projected_and_says_why() -> None:
    p = project(dict(CPU_RUN, flops_per_step=None), "A100-SXM4-80GB", price_per_hour=1.5)
    assert isinstance(p, NotProjected) and "no FLOPs per step" in p.reason
    assert "flops_per_step=" in p.reason and p.floor_s is None and p.price_per_hour == 1.5
    assert ranked([p]) == [] and str(p).startswith("what-if: 1 x NVIDIA A100 SXM4 80GB: not")


@pytest.mark.parametrize(
    ("run", "gpu", "says"),
    [
        (dict(CPU_RUN, steps=0, facts={}), "L4", "no steps"),
        (dict(CPU_RUN, steps=5, steady_steps=0, step_time_s=None), "L4", "all warm-up"),
        (CPU_RUN, "NVIDIA H800", "no dense bf16 peak"),
        (dict(CPU_RUN, facts={"steps_per_epoch": 400}), "L4:2", "counts no parameters"),
    ],
)
def test_what_the_report_lacks_is_the_reason(run, gpu, says) -> None:
    name, _, count = gpu.partition(":")
    p = project(run, name, int(count or 1))
    assert isinstance(p, NotProjected) and says in p.reason, p


def test_ranking_by_time_and_by_cost() -> None:
    found = [
        project(GPU_RUN, "Tesla T4", price_per_hour=0.35),
        project(GPU_RUN, "H100 SXM", 8, price_per_hour=3.0),
        project(GPU_RUN, "A100-SXM4-80GB", price_per_hour=1.5),
        project(GPU_RUN, "L4"),
    ]
    order = ranked(found)
    assert [p.key for p, _, _ in order] == ["h100-sxm", "a100-sxm4-80gb", "l4", "t4"]
    cost = {p.key: c for p, _, c in order}
    costs = {p.key: p.cost_per_epoch for p in found if p.cost_per_epoch is not None}
    assert [k for k, _ in sorted(costs.items(), key=lambda kv: kv[1])] == sorted(
        costs, key=lambda k: cost[k]
    )
    assert cost["l4"] is None
    table = render(found)
    assert "fastest: 8 x NVIDIA H100" in table and "cheapest per epoch" in table
    assert "assumes:" in table


# -- on a real run, and from the command line --------------------------------------------

torch_only = pytest.mark.torch


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
    loader = [(torch.randn(32, 128), torch.randint(0, 8, (32,))) for _ in range(20)]
    report = accelkit.torch.fit(
        model,
        loader,
        torch.optim.SGD(model.parameters(), lr=0.1),
        torch.nn.CrossEntropyLoss(),
        plan=plan(HardwareInfo(source="snapshot"), Request(framework="torch")),
        progress=False,
    )
    path = tmp_path_factory.mktemp("run") / "run.json"
    report.save(path)
    return report, path


@torch_only
def test_a_real_tiny_cpu_run_is_not_projected_its_launches_outlast_its_kernels(saved_run) -> None:
    report, _ = saved_run
    p = project(report, "H100 SXM", count=8, price_per_hour=3.0)
    assert isinstance(p, NotProjected) and p.reason.startswith("host-bound: its kernels")
    wait = report.input_wait_share * report.step_time_s
    optimizer = report.facts["optimizer"]
    looped = optimizer["implementation"] == "for-loop"
    kernels = 2 * len(report.facts["layers"]) + looped * optimizer["parameter_tensors"]
    assert report.facts["compiled"] is False  # eager: its host issues every op
    assert f"eager PyTorch host takes to issue its {kernels} ops" in p.reason
    assert p.floor_s == pytest.approx(wait + kernels * EAGER_DISPATCH_S)
    assert kernels * EAGER_DISPATCH_S > kernels * LAUNCH_GAP_S


@torch_only
def test_report_project_on_a_real_cpu_run_with_a_large_step(saved_run) -> None:
    report, _ = saved_run
    large = dict(report.to_dict(), flops_per_step=1e13)  # as if the model were 1e6 times wider
    p = project(large, "H100 SXM", count=8, price_per_hour=3.0)
    assert p.steps_per_epoch == pytest.approx(20 / 8)
    wait = report.input_wait_share * report.step_time_s
    assert p.input_wait_s == pytest.approx(wait)
    compute = 1e13 / (DEFAULT_MFU * 989.4e12)
    assert p.compute_s == pytest.approx(compute, rel=1e-3)
    allreduce = 2 * 7 / 8 * report.facts["parameter_bytes"] / 450e9  # hidden by backward
    assert p.allreduce_s == pytest.approx(allreduce) and p.exposed_allreduce_s == 0.0
    assert p.step_time_s == pytest.approx(wait + p.host_s + compute, rel=1e-3)
    assert p.cost_per_epoch == pytest.approx(p.epoch_time_s / 3600 * 3.0 * 8)


def accelkit_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "accelkit", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": SRC},
    )


@torch_only
def test_cli_report_ranks_projections(saved_run, tmp_path) -> None:
    report, _ = saved_run
    path = tmp_path / "large.json"  # the same run with a step large enough to project
    path.write_text(json.dumps(dict(report.to_dict(), flops_per_step=1e13), default=str))
    done = accelkit_cli(
        "report",
        str(path),
        "--project",
        "A100-SXM4-80GB",
        "--project",
        "H100 SXM:8",
        "--project",
        "Tesla T4",
        "--price",
        "H100 SXM=3.0",
        "--price",
        "a100-sxm4-80gb=1.5",
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "what-if projection" in out and "by time" in out and "by cost" in out
    assert "fastest: 8 x NVIDIA H100 SXM5 80GB" in out and "not projected" not in out
    assert "assumes: MFU 40.0% (assumed" in out

    as_json = accelkit_cli(
        "report", str(path), "--project", "Tesla T4", "--project", "L4:2", "--json"
    )
    document = json.loads(as_json.stdout)
    ranks = [(p["key"], p["rank_by_time"]) for p in document["projections"]]
    assert ranks == [("l4", 1), ("t4", 2)]
    assert document["projections"][0]["rank_by_cost"] is None
    assert all(p["projected"] for p in document["projections"])


@torch_only
def test_cli_report_says_which_were_not_projected_and_why(saved_run) -> None:
    _, path = saved_run  # the tiny MLP itself: its launches outlast its kernels anywhere
    done = accelkit_cli("report", str(path), "--project", "H100 SXM:8", "--project", "L4")
    assert done.returncode == 0, done.stderr
    assert "not projected: 8 x NVIDIA H100 SXM5 80GB: host-bound" in done.stdout
    assert "fastest" not in done.stdout and "by time" not in done.stdout
    as_json = accelkit_cli("report", str(path), "--project", "H100 SXM:8", "--json")
    [h100] = json.loads(as_json.stdout)["projections"]
    assert h100["projected"] is False and h100["rank_by_time"] is None
    assert h100["reason"].startswith("host-bound") and h100["floor_s"] > 0


@torch_only
@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("--project", "h2000"), 1, "No datasheet row"),
        (("--project", "Tesla T4", "--price", "L4=1"), 2, "no --project names"),
        (("--project", "Tesla T4", "--price", "1.5"), 2, "NAME=USD_PER_HOUR"),
        (("--project", "Tesla T4:0"), 2, "whole number"),
        (("--price", "L4=1"), 2, "go with --project"),
        (("--project", "L4", "--price", "L4=nan"), 2, "is not a price"),
        (("--project", "L4", "--price", "L4=inf"), 2, "is not a price"),
        (("--project", "L4", "--price", "L4=-1"), 2, "is not a price"),
    ],
)
def test_cli_projection_errors(saved_run, args, code, message) -> None:
    _, path = saved_run
    done = accelkit_cli("report", str(path), *args)
    assert done.returncode == code and message in done.stderr, done.stderr


@torch_only
def test_cli_report_advises_a_saved_report_again(saved_run, tmp_path) -> None:
    report, _ = saved_run
    data = report.to_dict()
    data["advice"] = []
    data["input_wait_share"] = 0.5  # as if this run had waited for its input
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(data, default=str))
    done = accelkit_cli("report", str(path))
    assert done.returncode == 0, done.stderr
    assert "1. [warning] input-bound: 50% of step time" in done.stdout
    assert "evidence: input_wait_share=0.5" in done.stdout
    assert "do: DataLoader(dataset, batch_size=..., num_workers=" in done.stdout
    assert RunReport.load(path).advice == []  # the file is left as it was
