"""accelkit.torch.fit and Meter on real PyTorch models (CPU here, CUDA behind the gpu marker)."""

from __future__ import annotations

import json
import threading

import pytest

import accelkit
from accelkit.hardware.info import GpuInfo, HardwareInfo
from accelkit.planning import Request, plan

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from ..helpers.torch_data import CPU_PLAN, mlp, separable, train

A100_PLAN = plan(
    HardwareInfo(gpus=(GpuInfo(0, "NVIDIA A100-SXM4-80GB", compute_capability=(8, 0)),)), Request()
)


class Boom(Exception):
    pass


def test_fit_learns_and_reports_consistent_figures() -> None:
    report = train(epochs=3)
    assert len(report.losses) == 3 and report.losses[-1] < 0.5 * report.losses[0]
    assert report.steps == 3 * 32 and report.warmup_steps == 3
    assert report.steady_steps == report.steps - report.warmup_steps
    # MLP 16->64->4, batch 32: forward 2*B*(16*64 + 64*4); backward has both weight
    # gradients and the second layer's input gradient (the data needs no gradient).
    forward = 2 * 32 * (16 * 64 + 64 * 4)
    assert report.flops_per_step == forward + 2 * 32 * (16 * 64 + 64 * 4) + 2 * 32 * 64 * 4
    assert report.achieved_tflops == pytest.approx(
        report.flops_per_step * report.steady_steps / report.steady_seconds / 1e12
    )
    assert report.samples_per_second == pytest.approx(
        32 * report.steady_steps / report.steady_seconds
    )
    assert report.batch_size == 32
    assert 0 <= report.input_wait_share <= 1
    assert report.mfu is None and "no GPU" in report.notes["mfu"]
    assert report.gpu_utilization is None and "gpu_utilization" in report.notes


def test_steps_limit_the_run() -> None:
    report = train(epochs=5, steps=10)
    assert report.steps == 10 and report.epochs == 5


def test_user_flops_override_the_count() -> None:
    report = train(steps=8, flops_per_step=1e9)
    assert report.flops_per_step == 1e9 and report.flops_method == "given by the user"


def test_gradient_accumulation_steps_the_optimizer_every_n_batches() -> None:
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    calls = []
    optimizer.register_step_post_hook(lambda *_: calls.append(1))
    accelkit.torch.fit(
        model,
        separable(),
        optimizer,
        torch.nn.CrossEntropyLoss(),
        steps=10,
        accumulation_steps=4,
        plan=CPU_PLAN,
        progress=False,
    )
    assert len(calls) == 3  # after batches 4 and 8, and the remainder at the end


def test_bf16_plan_trains_a_cnn_with_float32_outputs_on_cpu() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(8 * 8 * 8, 2),
    )
    x = torch.randn(256, 3, 8, 8)
    y = (x.mean(dim=(1, 2, 3)) > 0).long()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=32)
    seen = []

    def loss_fn(outputs, targets):
        loss = torch.nn.functional.cross_entropy(outputs, targets)
        seen.append((outputs.dtype, loss.dtype))
        return loss

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    report = accelkit.torch.fit(
        model, loader, optimizer, loss_fn, epochs=4, plan=A100_PLAN, progress=False, device="cpu"
    )
    assert report.precision == "bf16"
    # 16-bit outputs, float32 loss: autocast runs the loss in float32.
    assert set(seen) == {(torch.bfloat16, torch.float32)}
    assert report.losses[-1] < report.losses[0]
    conv = model[0].weight
    assert conv.is_contiguous(memory_format=torch.channels_last)


def test_one_convolution_is_not_a_conv_net_for_channels_last() -> None:
    """A ViT-like model (one patch-embedding convolution) keeps its layout under a plan
    that converts conv nets; asked for explicitly, it converts."""
    torch.manual_seed(0)
    for asked, converted in ((None, False), (True, True)):
        model = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 4, stride=4), torch.nn.Flatten(), torch.nn.Linear(8 * 2 * 2, 2)
        )
        data = [(torch.randn(4, 3, 8, 8), torch.randint(0, 2, (4,))) for _ in range(3)]
        accelkit.torch.fit(
            model,
            data,
            torch.optim.SGD(model.parameters(), lr=0.1),
            torch.nn.CrossEntropyLoss(),
            plan=A100_PLAN,
            device="cpu",
            progress=False,
            channels_last=asked,
        )
        weight = model[0].weight
        assert weight.is_contiguous(memory_format=torch.channels_last) is converted


def test_tokens_per_second_from_token_id_batches() -> None:
    vocab, length = 50, 12
    torch.manual_seed(0)
    tokens = torch.randint(0, vocab, (128, length))
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(tokens, tokens), batch_size=16
    )
    model = torch.nn.Sequential(torch.nn.Embedding(vocab, 32), torch.nn.Linear(32, vocab))

    def loss_fn(logits, targets):
        return torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))

    report = accelkit.torch.fit(
        model,
        loader,
        torch.optim.AdamW(model.parameters()),
        loss_fn,
        epochs=2,
        plan=CPU_PLAN,
        progress=False,
    )
    assert report.tokens_per_second == pytest.approx(report.samples_per_second * length)


def test_user_errors_propagate_unchanged() -> None:
    def loss_fn(outputs, targets):
        raise Boom("from the user's loss")

    with pytest.raises(Boom, match="from the user's loss"):
        accelkit.torch.fit(
            mlp(),
            separable(),
            torch.optim.SGD(mlp().parameters(), lr=0.1),
            loss_fn,
            plan=CPU_PLAN,
            progress=False,
        )
    assert not [t for t in threading.enumerate() if t.name == "accelkit-nvml"]


def test_keyboard_interrupt_leaves_a_partial_report() -> None:
    calls = []

    def loss_fn(outputs, targets):
        calls.append(1)
        if len(calls) == 7:
            raise KeyboardInterrupt
        return torch.nn.functional.cross_entropy(outputs, targets)

    model = mlp()
    report = accelkit.torch.fit(
        model,
        separable(),
        torch.optim.SGD(model.parameters(), lr=0.1),
        loss_fn,
        plan=CPU_PLAN,
        progress=False,
        flops_per_step=1.0,
    )
    assert report.interrupted and report.steps == 6


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"epochs": 0}, "epochs"),
        ({"steps": 0}, "steps"),
        ({"accumulation_steps": 0}, "accumulation_steps"),
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        train(**kwargs)


def test_empty_loader_is_a_clear_error() -> None:
    empty = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.zeros(0, 16), torch.zeros(0, dtype=torch.long)),
        batch_size=4,
    )
    with pytest.raises(ValueError, match="no batch"):
        train(loader=empty)


def test_meter_in_a_hand_written_loop_counts_flops_on_the_first_step() -> None:
    model, loader = mlp(), separable()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    meter = accelkit.torch.Meter(model, plan=CPU_PLAN)
    with meter:
        for x, y in loader:
            with meter.step((x, y)):
                loss = torch.nn.functional.cross_entropy(model(x), y)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
    report = meter.report()
    assert report.steps == 32 and report.flops_method.startswith("torch FlopCounterMode")
    # The inline count sees the same forward and backward as the fit's counter.
    assert report.flops_per_step == train(steps=4).flops_per_step


def test_report_round_trips_through_json(tmp_path) -> None:
    report = train(steps=6)
    path = tmp_path / "run.json"
    report.save(path)
    loaded = accelkit.RunReport.load(path)
    assert loaded == report
    document = json.loads(path.read_text())
    for key in (
        "samples_per_second",
        "flops_per_step",
        "achieved_tflops",
        "peak_tflops",
        "mfu",
        "input_wait_share",
        "gpu_utilization",
        "peak_memory_bytes",
        "world_size",
        "global_samples_per_second",
        "scaling_efficiency",
        "advice",
        "notes",
        "hardware",
        "plan",
        "versions",
    ):
        assert key in document


@pytest.mark.gpu
def test_fit_on_cuda_reports_gpu_figures_and_mfu() -> None:
    gpu_plan = accelkit.auto_configure(framework="torch", verbose=False)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)
    )
    x, y = torch.randn(4096, 1024), torch.randn(4096, 1024)
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(x, y), batch_size=256, pin_memory=True
    )
    report = accelkit.torch.fit(
        model,
        loader,
        torch.optim.AdamW(model.parameters()),
        torch.nn.MSELoss(),
        epochs=20,
        plan=gpu_plan,
        progress=False,
        window=16,
    )
    assert report.device.startswith("cuda")
    assert report.peak_memory_bytes and report.peak_memory_bytes > 0
    assert report.gpu_utilization is not None
    if report.peak_tflops is not None:
        assert 0 < report.mfu < 1


def test_accelkit_fit_takes_torch_fits_arguments_positional_or_by_name() -> None:
    model = mlp(16, 64, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = separable()
    loss_fn = torch.nn.CrossEntropyLoss()
    report = accelkit.fit(
        model, loader, optimizer, loss_fn, epochs=1, plan=CPU_PLAN, progress=False
    )
    assert report.framework == "torch" and report.epochs == 1
    report = accelkit.fit(
        model, loader, optimizer=optimizer, loss_fn=loss_fn, steps=4, plan=CPU_PLAN, progress=False
    )
    assert report.steps == 4
    with pytest.raises(
        TypeError,
        match=r"accelkit.torch.fit.*missing a required argument: "
        r"'loss_fn'",
    ):
        accelkit.fit(model, loader, optimizer, plan=CPU_PLAN)


def test_meter_reports_token_ids_rounded_by_a_16_bit_batch() -> None:
    # Ids cast with the batch, {k: v.to(device, torch.bfloat16)}: bfloat16 holds whole
    # numbers exactly only to 256, so 12345 arrives as 12352: a critical verdict.
    embedding = torch.nn.Embedding(20000, 8)
    ids = torch.randint(0, 20000, (8, 16))
    ids[0, 0] = 12345
    meter = accelkit.torch.Meter(embedding, plan=CPU_PLAN, flops_per_step=1.0, warmup=0)
    with meter:
        for _ in range(3):
            batch = ids.to(torch.bfloat16)
            with meter.step(batch):
                embedding(batch.long()).sum().backward()
    report = meter.report()
    found = report.facts["half_integer_inputs"][0]
    assert found["dtype"] == "bfloat16" and found["exact_up_to"] == 256
    assert {a["id"]: a["severity"] for a in report.advice}.get("half_ids") == "critical"


_BAD = {  # argument: values that must be refused (issue 13: -1 clipped into gradient ascent)
    "epochs": [0, -1, 1.5, True, "2", float("nan")],
    "steps": [0, -3, 2.5, True, "4"],
    "accumulation_steps": [0, 1.5, True, "2", -1],
    "warmup": [-1, 0.5, True, "3"],
    "window": [0, 2.5, False, "10"],
    "max_grad_norm": [-1, 0, float("nan"), float("inf"), True, "1"],
    "flops_per_step": [-1.0, 0, float("nan"), float("inf"), True],
    "tokens_per_sample": [0, -1, 1.5, True],
}


@pytest.mark.parametrize(
    ("name", "value"), [(name, value) for name, values in _BAD.items() for value in values]
)
def test_every_numeric_argument_is_checked_before_training(name, value) -> None:
    model = mlp(16, 64, 4)
    with pytest.raises(ValueError, match=f"{name}={value!r} must be"):
        accelkit.torch.fit(
            model,
            separable(),
            torch.optim.SGD(model.parameters(), lr=0.1),
            torch.nn.CrossEntropyLoss(),
            plan=CPU_PLAN,
            progress=False,
            **{name: value},
        )


@pytest.mark.parametrize(
    ("name", "value"),
    [("warmup", -1), ("window", 0), ("flops_per_step", float("nan")), ("tokens_per_sample", True)],
)
def test_meter_checks_its_numeric_arguments(name, value) -> None:
    with pytest.raises(ValueError, match=f"{name}={value!r} must be"):
        accelkit.torch.Meter(mlp(16, 4), plan=CPU_PLAN, **{name: value})


def test_a_cpu_run_reports_this_hosts_cpus_not_a_guess() -> None:
    # The input-wait advice sizes num_workers from the CPU count: a CPU run keeps the
    # detected host's count (it used to drop it, and the rule assumed 8 cores).
    from accelkit.hardware import environment

    report = train(epochs=1)
    assert report.hardware["cpu_count"] == environment.cpu_count()
    assert report.hardware["gpus"] == []


def test_meter_steps_without_a_batch_give_no_throughput_rather_than_zero() -> None:
    model = mlp(16, 4)
    meter = accelkit.torch.Meter(model, plan=CPU_PLAN, flops_per_step=1.0, warmup=1)
    with meter:
        for _ in range(4):
            with meter.step():
                model(torch.zeros(2, 16)).sum().backward()
    report = meter.report()
    assert report.samples_per_second is None and report.batch_size is None
    assert "no batch sizes seen" in report.notes["samples_per_second"]
    assert report.step_time_s is not None and report.steady_steps == 3


def test_the_fit_counts_flops_on_its_first_step_without_running_the_model_again() -> None:
    calls = {"forward": 0, "loss": 0}
    model = mlp()
    model.register_forward_pre_hook(lambda *_: calls.__setitem__("forward", calls["forward"] + 1))

    def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        calls["loss"] += 1
        return torch.nn.functional.cross_entropy(output, target)

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    report = accelkit.torch.fit(
        model, separable(n=160), optimizer, loss_fn, plan=CPU_PLAN, progress=False, tune=False
    )
    assert report.steps == 5 and calls == {"forward": 5, "loss": 5}
    # forward 2*B*(16*64 + 64*4); backward both weight gradients and the second layer's
    # input gradient, as in the first test of this file
    forward = 2 * 32 * (16 * 64 + 64 * 4)
    assert report.flops_per_step == 2 * forward + 2 * 32 * 64 * 4
