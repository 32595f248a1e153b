"""The advisor on real PyTorch runs on this CPU, each built so its condition is true,
and on a healthy run where no rule may warn."""

from __future__ import annotations

import functools
import time

import pytest

import accelkit
from accelkit.advisor import Severity, advise
from accelkit.advisor.context import DEFAULT_MFU
from accelkit.advisor.types import amdahl
from accelkit.hardware import detect
from accelkit.planning import Request, plan

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from ..helpers import torch_data
from ..helpers.torch_data import CPU_PLAN, batches, mlp

# The runs train where their tensors are built, on the CPU, on a GPU host too.
train = functools.partial(torch_data.train, lr=1e-3, device="cpu")
WIDTHS = (256, 512, 256, 8)  # the MLP of most runs here


def verdicts(report):
    return {a["id"]: a for a in report.advice}


@pytest.fixture(scope="module")
def healthy():
    # Batches of 512, not 64: a step of about 2 ms beside the loop's own 0.1 ms of
    # fetching read 5.8% input wait on a busy CI machine; 16 ms beside it reads under 2%.
    return train(mlp(*WIDTHS), batches(batch=512), epochs=1)


def test_healthy_run_gets_no_warning(healthy) -> None:
    assert healthy.input_wait_share < 0.05, healthy.input_wait_share
    assert [a for a in healthy.advice if a["severity"] != "info"] == []
    assert "input_bound" not in verdicts(healthy) and "alignment" not in verdicts(healthy)
    assert healthy.facts["layers"][0] == {
        "name": "Sequential.0",
        "type": "Linear",
        "dims": {"in_features": 256, "out_features": 512},
    }
    assert healthy.facts["batch_size"] == 512 and healthy.facts["steps_per_epoch"] == 48
    assert healthy.facts["data_parallel"] is False and healthy.facts["run_seconds"] > 0


class Sleepy(torch.utils.data.Dataset):
    """Each sample costs 20 ms of 'decoding': 160 ms per batch against a step of a tiny
    model that takes well under a millisecond, and under 40 ms on a machine whose two
    cores carry five processes (at 3 ms a sample, such a machine read 'info': the wait
    under 20% of the step)."""

    def __len__(self) -> int:
        return 128

    def __getitem__(self, i: int):
        time.sleep(0.02)
        generator = torch.Generator().manual_seed(i)
        return torch.randn(64, generator=generator), i % 8


def test_a_dataset_that_sleeps_makes_input_bound_the_top_verdict() -> None:
    report = train(mlp(64, 64, 8), torch.utils.data.DataLoader(Sleepy(), batch_size=8))
    top = report.advice[0]
    assert top["id"] == "input_bound" and top["severity"] == "warning"
    share = report.input_wait_share
    assert top["evidence"]["input_wait_share"] == pytest.approx(share, abs=1e-4)
    assert top["evidence"]["loader.num_workers"] == 0
    # One process loads now; the suggested workers overlap the step: workers + 1 at most.
    workers = int(top["action"].split("num_workers=")[1].split(",")[0])
    assert top["speedup"] == pytest.approx(min(1 / (1 - share), workers + 1))
    bound = f"{workers + 1:.2f}"  # the workers' reach: named as a cap only where it binds
    capped = top["speedup"] == pytest.approx(workers + 1)
    reach = (
        f"at most {bound}x: {workers} loading processes" if capped else f"a bound of {bound} times"
    )
    assert reach in top["expected_gain"]
    assert "num_workers=" in top["action"] and "persistent_workers=True" in top["action"]
    assert "pin_memory" not in top["action"]  # a CPU run: nothing to pin for
    text = str(report)
    assert "1. [warning] input-bound" in text and "evidence: input_wait_share=" in text


def test_a_layer_of_1001_units_gets_alignment_advice_naming_it() -> None:
    report = train(mlp(256, 1001, 8), batches(n=12))
    found = verdicts(report)["alignment"]
    assert found["evidence"]["misaligned"] == [
        "Sequential.0 (Linear out_features=1001)",
        "Sequential.2 (Linear in_features=1001)",
    ]
    assert found["severity"] == "info"  # fp32 on a CPU: no tensor cores here
    assert "1001 -> 1008" in found["action"]
    # The same run planned for an A100 in bf16: on tensor cores it is a warning.
    a100 = accelkit.plan_for("A100-SXM4-80GB")
    assert {a.id: a for a in advise(None, a100, report)}["alignment"].severity is Severity.WARNING


def test_what_if_ampere_in_fp32_gets_precision_advice_with_its_gain(healthy) -> None:
    fp32 = accelkit.plan_for("A100-SXM4-80GB", precision="fp32")
    found = {a.id: a for a in advise(fp32.hardware, fp32, healthy)}["precision"]
    assert found.severity is Severity.WARNING
    assert found.speedup == pytest.approx(amdahl(DEFAULT_MFU, 312 / 19.5))
    assert "312 / 19.5 = 16.0" in found.expected_gain and "assumed" in found.expected_gain
    assert "precision='bf16'" in found.action
    assert found == {a.id: a for a in advise(None, fp32, healthy)}["precision"]
    bf16 = accelkit.plan_for("A100-SXM4-80GB")
    assert "precision" not in {a.id for a in advise(None, bf16, healthy)}
    # On the CPU it ran on there is no tensor core to point at.
    assert "precision" not in verdicts(healthy)


@pytest.mark.skipif(
    torch.cuda.is_available(),
    reason="nn.DataParallel runs on the GPUs whenever CUDA is present: see the cuda variant below",
)
def test_data_parallel_is_named() -> None:
    report = train(torch.nn.DataParallel(mlp(*WIDTHS)), batches(n=8))
    assert report.facts["data_parallel"] is True
    found = verdicts(report)["data_parallel"]
    assert "torchrun" in found["action"] and found["severity"] == "info"  # no GPUs here


@pytest.mark.gpu
def test_data_parallel_is_named_on_cuda() -> None:
    on_gpus = plan(detect(), Request(framework="torch", precision="fp32"))
    gpus = on_gpus.hardware.gpu_count
    report = train(torch.nn.DataParallel(mlp(*WIDTHS)), batches(n=8), plan=on_gpus, device="cuda")
    assert report.facts["data_parallel"] is True and report.device.startswith("cuda")
    found = verdicts(report)["data_parallel"]
    assert "torchrun" in found["action"]
    assert found["severity"] == ("warning" if gpus > 1 else "info")
    assert found["evidence"]["visible_gpus"] == gpus


def test_nan_in_the_data_is_a_critical_verdict_with_the_step() -> None:
    report = train(mlp(*WIDTHS), batches(n=24, nan_from=6), window=8)
    top = report.advice[0]
    assert top["id"] == "nonfinite_loss" and top["severity"] == "critical"
    # The first NaN batch is step 7; the next window boundary after warm-up is step 11.
    assert 7 <= report.facts["first_nonfinite_loss_step"] <= 11
    assert top["evidence"]["nonfinite_epochs"] == [1]
    assert "set_detect_anomaly" in top["action"]


def test_fp16_loss_scale_collapse_in_a_hand_written_loop() -> None:
    """fp16 autocast on the CPU with inputs of 1e4: the first Linear overflows fp16 on
    every step, so GradScaler skips each step and halves its scale until it is ~0."""
    model = mlp(16, 64, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    meter = accelkit.torch.Meter(model, plan=CPU_PLAN, grad_scaler=scaler, warmup=1, window=5)
    x, y = torch.randn(32, 16) * 1e4, torch.randint(0, 4, (32,))
    with meter:
        for _ in range(30):
            with meter.step((x, y)):
                with torch.autocast("cpu", dtype=torch.float16):
                    loss = torch.nn.functional.cross_entropy(model(x).float(), y)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
        meter.record_loss(loss.item())
    report = meter.report()
    scale = report.facts["loss_scale"]
    assert scale["initial"] == 65536.0 and scale["history"][-1][1] < 1e-3
    found = verdicts(report)
    assert found["loss_scale"]["severity"] == "critical"
    assert found["loss_scale"]["evidence"]["lowest_scale"] == scale["history"][-1][1]
    assert found["nonfinite_loss"]["severity"] == "critical"


def test_low_mfu_against_the_measured_matmul_rate_points_at_the_profiler() -> None:
    # A tiny model on pre-built batches: the step is Python overhead, far from the
    # matmul rate calibrate=True measures, and no other rule explains it.
    report = train(mlp(64, 64, 8), batches(n=30, dim=64), calibrate=True)
    assert report.mfu_calibrated < 0.3
    found = verdicts(report)["low_mfu"]
    assert "measured matmul rate" in found["title"] and "torch.profiler" in found["action"]
