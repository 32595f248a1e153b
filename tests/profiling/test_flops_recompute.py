"""MFU stays on model FLOPs when activations are recomputed (issue 26, part 4).

Activation checkpointing re-runs the checkpointed forward in backward: work the hardware
does that the model does not need. PaLM (appendix B) keeps it out of MFU and counts it
in HFU. Each door counts a step once; the model FLOPs of a run with checkpointing must
equal those of the same run without it, and the hardware FLOPs must be larger by about
one forward of the checkpointed blocks. Before the split, `flops_per_step` counted the
recomputation (a checkpointed Llama's 1.2x on the H200), and MFU rose with it.
"""

from __future__ import annotations

import tempfile
import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore::FutureWarning")]

from torch.utils.checkpoint import checkpoint

import accelkit.torch
from accelkit.hardware.info import GpuInfo, HardwareInfo
from accelkit.planning import Request, plan
from accelkit.profiling.assemble import Measurements, report_from
from accelkit.profiling.clock import ClockSummary
from accelkit.profiling.flops_torch import count_train_step_flops

from ..helpers.torch_data import CPU_PLAN
from ..helpers.transformers_models import llama, lm_batches

OPTIONS = {"plan": CPU_PLAN, "warmup": 1, "window": 1, "sample_gpu": False, "progress": False}
BATCHES = lm_batches(n=3, batch=2, length=32)


def _llama(reentrant: bool | None):
    """A tiny `LlamaForCausalLM`; `reentrant` None: no checkpointing, else the
    `use_reentrant` of `gradient_checkpointing_enable` (the non-reentrant one is
    transformers 5's default, the reentrant one 4.x's)."""
    model = llama(layers=3, vocab=1000, context=32)
    if reentrant is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": reentrant}
            )
    return model.train()


def _fit(model, batches=BATCHES, loss_fn=None):
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    return accelkit.torch.fit(model, batches, optimizer, loss_fn, tune=False, **OPTIONS)


@pytest.fixture(scope="module")
def plain_llama():
    """The fit's report and the counted forward of the Llama without checkpointing."""
    forward = count_train_step_flops(_llama(None), BATCHES[0]).forward
    return _fit(_llama(None)), forward


@pytest.mark.parametrize("reentrant", [False, True], ids=["non-reentrant", "reentrant"])
def test_a_checkpointed_llama_has_the_model_flops_of_the_plain_one(plain_llama, reentrant) -> None:
    plain, forward = plain_llama
    report = _fit(_llama(reentrant))
    assert report.flops_per_step == pytest.approx(plain.flops_per_step, rel=0.01)
    recomputed = report.hardware_flops_per_step - report.flops_per_step
    # about one forward of the decoder layers: not the embedding-free head, and the
    # non-reentrant checkpoint stops once the tensors the backward needs are back
    assert 0.5 * forward < recomputed <= forward
    assert report.achieved_tflops < report.hardware_tflops
    assert "activation checkpointing recomputed" in report.notes["flops_per_step"]
    assert plain.hardware_flops_per_step == plain.flops_per_step


class _Blocks(torch.nn.Module):
    """Residual MLP blocks, each checkpointed with `torch.utils.checkpoint` when asked,
    after an input layer (the reentrant checkpoint gives no gradients to a block whose
    input needs none)."""

    def __init__(self, reentrant: bool | None, width: int = 32, depth: int = 3) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.reentrant = reentrant
        self.embed = torch.nn.Linear(width, width)
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(
                torch.nn.Linear(width, 4 * width),
                torch.nn.GELU(),
                torch.nn.Linear(4 * width, width),
            )
            for _ in range(depth)
        )
        self.head = torch.nn.Linear(width, 4)

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            if self.reentrant is None:
                x = x + block(x)
            else:
                x = x + checkpoint(block, x, use_reentrant=self.reentrant)
        return self.head(x)


def _mlp_batches():
    generator = torch.Generator().manual_seed(0)
    return [
        (torch.randn(16, 32, generator=generator), torch.randint(0, 4, (16,), generator=generator))
        for _ in range(3)
    ]


@pytest.mark.parametrize("reentrant", [False, True], ids=["non-reentrant", "reentrant"])
def test_torch_checkpoint_on_blocks_is_hardware_work_only(reentrant) -> None:
    loss = torch.nn.CrossEntropyLoss()
    plain = _fit(_Blocks(None), _mlp_batches(), loss)
    report = _fit(_Blocks(reentrant), _mlp_batches(), loss)
    assert report.flops_per_step == plain.flops_per_step
    # each block's first Linear runs again (the non-reentrant checkpoint stops at the
    # GELU output the second Linear saved; the reentrant one runs the whole block again)
    first = 2 * 16 * 32 * 128
    extra = report.hardware_flops_per_step - report.flops_per_step
    assert extra == 3 * (first if not reentrant else 2 * first)


def test_a_double_backward_in_the_loss_is_model_work() -> None:
    """A gradient penalty (``create_graph=True``) runs backward formulas with grad on,
    inside a backward pass, but calls no module there: it is not recomputation."""
    model = _Blocks(None)

    def penalised(output, target):
        grads = torch.autograd.grad(output.sum(), model.head.weight, create_graph=True)[0]
        return torch.nn.functional.cross_entropy(output, target) + grads.pow(2).sum()

    x, y = _mlp_batches()[0]
    count = count_train_step_flops(model, x, y, penalised)
    assert count.total and count.recomputed == 0 and count.hardware == count.total


def test_a_hand_written_loop_counts_model_flops_too() -> None:
    """`Meter` counts the user's first step inline, with the same split."""
    loss_fn = torch.nn.CrossEntropyLoss()
    reports = []
    for reentrant in (None, False):
        model = _Blocks(reentrant)
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        meter = accelkit.torch.Meter(model, optimizer=optimizer, **_meter_options())
        with meter:
            for x, y in _mlp_batches():
                with meter.step((x, y)):
                    loss_fn(model(x), y).backward()
                    optimizer.step()
                    optimizer.zero_grad()
        reports.append(meter.report())
    plain, checkpointed = reports
    assert checkpointed.flops_per_step == plain.flops_per_step
    assert checkpointed.hardware_flops_per_step > checkpointed.flops_per_step


def _meter_options():
    return {key: value for key, value in OPTIONS.items() if key != "progress"}


H100 = HardwareInfo(
    gpus=(GpuInfo(0, "NVIDIA H100 80GB HBM3", compute_capability=(9, 0)),), source="snapshot"
)


def _report(count=None, flops_per_step=None):
    clock = ClockSummary(
        steps=12,
        warmup_steps=2,
        warmup_s=1.0,
        steady_steps=10,
        steady_s=1.0,
        steady_samples=80,
        steady_tokens=0,
        input_wait_s=0.0,
        total_s=2.0,
        window_step_s=[],
    )
    return report_from(
        Measurements(
            framework="torch",
            model="m",
            device="cuda:0",
            plan=plan(H100, Request(framework="torch")),
            hardware=H100,
            clock=clock,
            flops=count,
            flops_per_step=flops_per_step,
        )
    )


def test_mfu_is_on_model_flops_and_hfu_on_hardware_flops() -> None:
    count = count_train_step_flops(_llama(False), BATCHES[0])
    report = _report(count)
    assert report.flops_per_step == count.total < report.hardware_flops_per_step
    assert report.mfu < report.hfu
    assert report.hfu / report.mfu == pytest.approx(count.hardware / count.total)
    assert report.mfu == pytest.approx(report.achieved_tflops / report.peak_tflops)


def test_without_recomputation_hfu_is_mfu() -> None:
    report = _report(count_train_step_flops(_llama(None), BATCHES[0]))
    assert report.hfu == report.mfu and report.hardware_tflops == report.achieved_tflops


def test_flops_the_user_gave_have_no_hardware_figure() -> None:
    report = _report(flops_per_step=1e12)
    assert report.mfu is not None and report.hfu is None
    assert report.hardware_flops_per_step is None
    assert "flops_per_step is given" in report.notes["hardware_flops_per_step"]


# -- the trainer doors ------------------------------------------------------------------


def _lightning(reentrant):
    lightning = pytest.importorskip("lightning.pytorch")
    import accelkit.lightning

    class Module(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = _llama(reentrant)

        def training_step(self, batch, index):
            return self.net(**batch).loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=1e-3)

    callback = accelkit.lightning.AccelkitCallback(**_meter_options())
    trainer = lightning.Trainer(
        callbacks=[callback],
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
    )
    loader = torch.utils.data.DataLoader(BATCHES, batch_size=None)
    trainer.fit(Module(), loader)
    return callback.report


def _hf(checkpointing):
    pytest.importorskip("accelerate", reason="the Trainer needs accelerate")
    import accelkit.hf

    samples = [{k: v[i] for k, v in batch.items()} for batch in BATCHES for i in range(2)]
    args = transformers.TrainingArguments(
        output_dir=tempfile.mkdtemp(),
        max_steps=3,
        per_device_train_batch_size=2,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        gradient_checkpointing=checkpointing,
    )
    callback = accelkit.hf.AccelkitCallback(**_meter_options())
    transformers.Trainer(_llama(None), args, train_dataset=samples, callbacks=[callback]).train()
    return callback.report


def test_the_lightning_door_counts_model_and_hardware_flops(plain_llama) -> None:
    plain, _ = plain_llama
    report = _lightning(reentrant=False)
    assert report.flops_per_step == pytest.approx(plain.flops_per_step, rel=0.01)
    assert report.hardware_flops_per_step > report.flops_per_step


def test_the_hf_door_counts_model_and_hardware_flops(plain_llama) -> None:
    plain, _ = plain_llama
    report = _hf(checkpointing=True)
    assert report.flops_per_step == pytest.approx(plain.flops_per_step, rel=0.01)
    assert report.hardware_flops_per_step > report.flops_per_step
