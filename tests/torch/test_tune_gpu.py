"""tune's GPU-only candidates and the trainers' trials on a real GPU (marked ``gpu``: run
on the GPU machine, skipped elsewhere with the reason)."""

from __future__ import annotations

import math
import tempfile
from typing import Any

import pytest

import accelkit

pytestmark = [pytest.mark.torch, pytest.mark.gpu]
torch = pytest.importorskip("torch")

from accelkit.torch.tuning import registry, trials

from ..helpers.tuning_record import units


def conv_net() -> Any:
    """A small conv net with BatchNorm: short kernels, a launch-bound step."""
    layers: list[Any] = [torch.nn.Conv2d(3, 32, 3, padding=1)]
    for _ in range(6):
        layers += [torch.nn.BatchNorm2d(32), torch.nn.ReLU(), torch.nn.Conv2d(32, 32, 3, padding=1)]
    return torch.nn.Sequential(*layers, torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                               torch.nn.Linear(32, 10))  # fmt: skip


def conv_fit() -> tuple[Any, list[Any]]:
    """(the report, the data) of `conv_net`'s tuned fit on the GPU."""
    plan = accelkit.auto_configure(framework="torch", verbose=False)
    torch.manual_seed(0)
    model = conv_net()
    data = [(torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,)))] * (
        registry.trial_steps(1) + 8
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    report = accelkit.torch.fit(
        model, data, optimizer, torch.nn.CrossEntropyLoss(), plan=plan, progress=False, tune=True
    )
    return report, data


def test_cuda_graphs_are_a_checked_candidate_on_a_launch_bound_step() -> None:
    report, data = conv_fit()
    graphs = next(c for c in report.tuning["candidates"] if c["settings"].get("cudagraphs"))
    assert graphs["status"] in ("chosen", "slower"), graphs["why"]
    assert graphs["steps"] == units(graphs)
    assert report.steps == len(data)
    assert report.losses and math.isfinite(report.losses[-1])


def test_cuda_graphs_not_kept_leave_no_graph_trees_and_the_fit_trains_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CUDA-graph candidate judged slower whatever its times: its trees are ended, so
    their memory pool goes back to the GPU (benchmarks/graphs_pool.py: 4.0 GB for GPT-2
    small B8 on the H200), and the kept step trains on."""
    from accelkit.torch.tuning import graphs

    torch._dynamo.reset()  # no trees of an earlier test: the trials record every one
    faster = trials.clearly_faster
    monkeypatch.setattr(
        trials,
        "clearly_faster",
        lambda trial, best: not trial.settings.get("cudagraphs") and faster(trial, best),
    )
    report, data = conv_fit()
    graphed = next(c for c in report.tuning["candidates"] if c["settings"].get("cudagraphs"))
    assert graphed["status"] == "slower", graphed["why"]
    assert not graphs.trees(torch, torch.device("cuda"))
    assert report.steps == len(data) and math.isfinite(report.losses[-1])
    # The run's peak is the kept step's; the graphs' pool, live beside the best's steps in
    # their paired rounds, raised the trials' own (TrialsPeak).
    assert report.facts["trials_peak_memory_bytes"] > report.peak_memory_bytes > 0
    assert "tune's trials" in report.notes["peak_memory_bytes"]


def test_the_reference_measures_cudnns_other_algorithms_and_leaves_no_trace() -> None:
    """The check's second eager pass on a GPU: cuDNN's deterministic algorithms for its
    duration, the script's settings back after it, the gradients as they were, and
    `kernel_grads` either None (the same gradients) or the other pass's, close to them."""
    from accelkit.torch.tuning.reference import GradSample, eager_reference

    torch.manual_seed(0)
    model = conv_net().cuda()
    params = list(model.parameters())
    batch = (torch.randn(16, 3, 32, 32, device="cuda"), torch.randint(0, 10, (16,), device="cuda"))
    seen = []

    def forward_backward(data: Any) -> Any:
        seen.append(torch.backends.cudnn.deterministic)
        with torch.autocast("cuda", torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(data[0]), data[1])
        loss.backward()
        return loss

    cudnn = torch.backends.cudnn
    saved = cudnn.benchmark, cudnn.deterministic
    cudnn.benchmark, cudnn.deterministic = True, False
    try:
        found = eager_reference(
            forward_backward, batch, module=model, params=params,
            sample=GradSample(params, torch), device=torch.device("cuda"), torch=torch,
        )  # fmt: skip
        assert (cudnn.benchmark, cudnn.deterministic) == (True, False)
    finally:
        cudnn.benchmark, cudnn.deterministic = saved
    assert seen == [False, True]
    assert all(param.grad is None for param in params)
    if found.kernel_grads is not None:
        spread = float((found.kernel_grads - found.grads).norm() / found.grads.norm())
        assert 0 < spread < 1


def test_the_lightning_callback_tunes_a_bf16_fit() -> None:
    pl = pytest.importorskip("lightning.pytorch")
    import accelkit.lightning

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(
                torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 16)
            )

        def training_step(self, batch: Any, index: int) -> Any:
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    steps = registry.trial_steps(1) + 8
    data = torch.utils.data.TensorDataset(
        torch.randn(64 * steps, 256), torch.randint(0, 16, (64 * steps,))
    )
    callback = accelkit.lightning.AccelkitCallback(tune=True)
    trainer = pl.Trainer(accelerator="gpu", devices=1, precision="bf16-mixed", max_steps=steps,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         callbacks=[callback])  # fmt: skip
    trainer.fit(Module(), torch.utils.data.DataLoader(data, batch_size=64))
    tuning = callback.report.tuning
    assert tuning["decision"] == "tuned"
    compiled = next(c for c in tuning["candidates"] if c["settings"].get("compile"))
    assert compiled["status"] in ("chosen", "slower"), compiled["why"]
    graphed = next(c for c in tuning["candidates"] if c["settings"].get("cudagraphs"))
    assert graphed["status"] in ("chosen", "slower"), graphed["why"]  # replayed and checked
    assert graphed["settings"]["compiled"] == "training_step"
    assert callback.report.steps == steps


def test_the_hf_callback_tunes_a_bf16_trainer() -> None:
    transformers = pytest.importorskip("transformers")
    import accelkit.hf

    config = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=256, n_positions=128,
                                     vocab_size=4096)  # fmt: skip
    ids = torch.randint(0, config.vocab_size, (8, config.n_positions))
    steps = registry.trial_steps(1) + 8
    rows = [{"input_ids": i, "labels": i} for i in ids] * steps
    plan = accelkit.auto_configure(framework="torch", verbose=False)
    args = transformers.TrainingArguments(
        **accelkit.hf.training_arguments(plan), output_dir=tempfile.mkdtemp(), max_steps=steps,
        per_device_train_batch_size=8, report_to=[], save_strategy="no", disable_tqdm=True,
    )  # fmt: skip
    callback = accelkit.hf.AccelkitCallback(tune=True)
    trainer = transformers.Trainer(transformers.GPT2LMHeadModel(config), args,
                                   train_dataset=rows, callbacks=[callback])  # fmt: skip
    trainer.train()
    tuning = callback.report.tuning
    assert tuning["decision"] == "tuned"
    compiled = next(c for c in tuning["candidates"] if c["settings"].get("compile"))
    assert compiled["status"] in ("chosen", "slower"), compiled["why"]
    graphed = next(c for c in tuning["candidates"] if c["settings"].get("cudagraphs"))
    assert graphed["status"] in ("chosen", "slower"), graphed["why"]  # replayed and checked


def test_max_autotune_is_a_checked_candidate_of_a_long_run() -> None:
    """Real inductor autotuning of a matmul step; the eager forward sleeps, so compile is
    kept and max-autotune tried on top of it (the run says ten million steps). Fresh
    batches with random labels: one batch repeated is learnt by heart within the trials,
    and a loss near zero fails compile's check (as it did on an H100 in session 30)."""
    import time

    class Mlp(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(
                torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 16)
            )

        def forward(self, x: Any) -> Any:
            if not torch.compiler.is_compiling():
                time.sleep(0.05)
            return self.net(x)

    plan = accelkit.auto_configure(framework="torch", verbose=False)
    torch.manual_seed(0)
    data = [
        (torch.randn(64, 1024), torch.randint(0, 16, (64,)))
        for _ in range(registry.trial_steps(1) + 4)
    ]
    model = Mlp()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    report = accelkit.torch.fit(
        model, iter(data), optimizer, torch.nn.CrossEntropyLoss(), plan=plan, progress=False,
        tune=True, steps=10**7,
    )  # fmt: skip
    by_name = {c["name"].split("+")[0]: c for c in report.tuning["candidates"]}
    assert report.tuning["compile"], report.tuning
    autotune = by_name["max-autotune"]
    assert autotune["status"] in ("chosen", "slower"), autotune["why"]
    assert autotune["settings"]["compile_mode"].startswith("max-autotune")
    assert autotune["check"]["failed"] is None
    assert report.steps == len(data) and math.isfinite(report.losses[-1])
