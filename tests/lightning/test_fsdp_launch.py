"""Lightning under a plan that shards: what runs where, with real fits.

Lightning cannot shard on the CPU. Its ``FSDPStrategy`` (what `trainer_kwargs` gives an
FSDP plan) is refused without a CUDA accelerator
(lightning/pytorch/trainer/connectors/accelerator_connector.py, ``_check_strategy_and_fallback``,
lines 431-438 in 2.6.6), and a subclass that slips past that check meets FSDP1's own refusal:
Lightning passes ``device_id=root_device.index`` (None on the CPU) and FSDP1 then wants an
accelerator (torch/distributed/fsdp/_init_utils.py, ``_init_device_handle``, lines 388-391 in
torch 2.13: "FSDP needs a non-CPU accelerator device"). So on the CPU `trainer_kwargs` gives
DDP and says why, and the callback notes the plan's sharding not applied (two gloo ranks
below); the sharded Lightning fit is the GPU test at the end (torchrun, one rank, NCCL).
The FSDP1 record (`sharding.described_fsdp1`) is checked on the CPU through FSDP1 made by
hand with ``device_id=cpu`` (which FSDP1 accepts), in a real Lightning fit.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import accelkit

from ..distributed.torch_launch import ranks_written
from ..helpers.sharded_plans import sharded

torch = pytest.importorskip("torch")
lightning = pytest.importorskip("lightning")

from accelkit.lightning import AccelkitCallback, trainer_kwargs
from accelkit.torch.distributed import sharding

WORKER = str(Path(__file__).with_name("fsdp_worker.py"))


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x):
        return x + torch.tanh(self.linear(x))


class Blocks(lightning.LightningModule):
    """A small block model; `wrap` makes each block an FSDP1 unit on the CPU."""

    def __init__(self, wrap=None) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 8), *[Block() for _ in range(3)])
        self.head = torch.nn.Linear(8, 1)
        self.wrap = wrap

    def configure_model(self) -> None:
        if self.wrap is not None:
            for i in range(1, len(self.net)):
                self.net[i] = self.wrap(self.net[i])

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.head(self.net(x)), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def _loader():
    generator = torch.Generator().manual_seed(1)
    data = torch.utils.data.TensorDataset(
        torch.randn(64, 4, generator=generator), torch.randn(64, 1, generator=generator)
    )
    return torch.utils.data.DataLoader(data, batch_size=16)


def _fit(module, callback, **kwargs) -> None:
    trainer = lightning.Trainer(
        **kwargs,
        callbacks=[callback],
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, _loader())


@pytest.mark.torch
def test_a_cpu_plan_that_shards_gives_ddp_that_the_trainer_takes(caplog) -> None:
    """Before: FSDPStrategy with accelerator "cpu", which lightning.Trainer refuses."""
    plan = sharded(accelkit.plan_for(None, framework="torch"))
    assert plan.device_type == "cpu"
    with caplog.at_level(logging.WARNING, logger="accelkit"):
        kwargs = trainer_kwargs(plan, model=Blocks())
    assert kwargs["strategy"] == "ddp" and kwargs["accelerator"] == "cpu", kwargs
    assert "Lightning cannot shard on the CPU" in caplog.text, caplog.text
    trainer = lightning.Trainer(**kwargs, logger=False, enable_checkpointing=False)
    assert type(trainer.strategy).__name__ == "DDPStrategy"


@pytest.fixture
def one_rank():
    """A gloo process group of this process alone, for FSDP1 made by hand on the CPU."""
    dist = torch.distributed
    if dist.is_initialized():
        pytest.skip("a process group is running already")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _fsdp1(module, mixed: bool = False):
    from torch.distributed.fsdp import FullyShardedDataParallel, MixedPrecision

    policy = (
        MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if mixed else None
    )
    return FullyShardedDataParallel(module, device_id=torch.device("cpu"), mixed_precision=policy)


@pytest.mark.torch
def test_fsdp1_is_described_as_fsdp1_and_fsdp2_as_before(one_rank) -> None:
    module = Blocks(wrap=lambda block: _fsdp1(block, mixed=True))
    module.configure_model()
    assert sharding.described_fsdp1(Blocks()) is None
    assert sharding.described(module) is None  # FSDP2 only: FSDP1 is not read as FSDP2
    root = _fsdp1(module)
    found = sharding.described_fsdp1(root)
    # one rank: FSDP1 falls back to NO_SHARD, its flat parameters plain (FlatParameter
    # when it shards): the record says which
    assert all(name.endswith("_flat_param") for name, _ in root.named_parameters())
    assert found == {
        "kind": "fsdp1",
        "blocks": "Block",
        "count": 3,
        "where": "net",
        "param_dtype": None,
        "reduce_dtype": None,
        "checkpointing": False,
        "offload": False,
        "by_script": True,
        "one_process": False,
        "sharding_strategy": "NO_SHARD",
    }, found
    inner = sharding.described_fsdp1(module)  # the units alone: their own policy
    assert inner is not None and (inner["param_dtype"], inner["reduce_dtype"]) == (
        "bfloat16",
        "float32",
    )
    fsdp2 = Blocks()
    for block in fsdp2.net[1:]:
        sharding.fsdp_api().fully_shard(block)
    sharding.fsdp_api().fully_shard(fsdp2)
    assert sharding.described_fsdp1(fsdp2) is None
    assert sharding.described(fsdp2).to_dict()["kind"] == "fsdp2"


@pytest.mark.torch
def test_the_callback_records_the_fsdp1_units_of_a_fit(one_rank) -> None:
    """A real CPU fit whose blocks are FSDP1 units: the report says how it was sharded
    (before: nothing about sharding)."""
    plan = sharded(accelkit.plan_for(None, framework="torch"))
    callback = AccelkitCallback(plan=plan, tune=False, warmup=1)
    _fit(Blocks(wrap=_fsdp1), callback, accelerator="cpu", devices=1)
    report = callback.report.to_dict()
    assert report["steps"] == 8, report
    found = report["facts"]["sharding"]
    assert (found["kind"], found["blocks"], found["count"]) == ("fsdp1", "Block", 3), found
    assert "sharding" not in report["notes"]


class RootFSDP1(lightning.pytorch.strategies.SingleDeviceStrategy):
    """FSDPStrategy's layout on the CPU: the LightningModule wrapped whole in a root FSDP1
    unit with each Block a nested unit, so that `training_step` reaches the blocks through
    the root (Lightning's forward redirection, as under FSDPStrategy)."""

    def setup(self, trainer) -> None:
        from torch.distributed.fsdp import FullyShardedDataParallel
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        self.model = FullyShardedDataParallel(
            self.model,
            device_id=torch.device("cpu"),
            auto_wrap_policy=ModuleWrapPolicy({Block}),
            use_orig_params=True,  # configure_optimizers sees the module's own parameters
        )
        super().setup(trainer)


@pytest.mark.torch
def test_the_callback_counts_a_root_fsdp1_fit_without_breaking_it(one_rank) -> None:
    """Before: the FLOP count ran `training_step` outside the root unit, a nested unit
    took itself for the root, and the fit's first step failed in FSDP1 ("Non-root FSDP
    instance's `_is_root` should not have been set yet"; seen on the H200 under
    FSDPStrategy). The count is the same as the unsharded fit's."""
    whole = AccelkitCallback(tune=False, warmup=1)
    _fit(Blocks(), whole, accelerator="cpu", devices=1)
    callback = AccelkitCallback(tune=False, warmup=1)
    _fit(Blocks(), callback, strategy=RootFSDP1(device=torch.device("cpu")))
    report = callback.report.to_dict()
    assert report["steps"] == 8 and report["facts"]["sharding"]["kind"] == "fsdp1", report
    assert report["flops_per_step"] == whole.report.flops_per_step > 0, report


@pytest.fixture(scope="module")
def cpu_ranks(tmp_path_factory):
    return ranks_written(tmp_path_factory.mktemp("lightning_fsdp_cpu"), WORKER, "cpu", timeout=300)


@pytest.mark.torch
@pytest.mark.distributed
def test_two_cpu_ranks_train_data_parallel_and_the_report_says_not_sharded(cpu_ranks) -> None:
    for rank, result in enumerate(cpu_ranks):
        run = result["planned"]
        assert run["strategy"] == "DDPStrategy" and run["parameter"] == "Parameter", run
        report = run["report"]
        assert report["world_size"] == 2 and report["facts"]["rank"] == rank
        assert report["steps"] == run["steps"] and "sharding" not in report["facts"]
        note = report["notes"]["sharding"]
        assert note.startswith("the plan shards with FSDP2, not applied"), note
        assert "DDPStrategy" in note
        assert len(run["losses"]) == run["steps"] and run["finite"], run["losses"]
        assert run["losses"][-1] < run["losses"][0], run["losses"]


# The GPU launch: Lightning's FSDPStrategy from `trainer_kwargs` of this GPU's plan made to
# shard, against the same plan unsharded, on one GPU (torchrun, NCCL, world size 1).
# Tolerances as tests/distributed/test_torch_fsdp_gpu.py's, for the same reason: FSDP1's
# MixedPrecision gathers bf16 parameters (every op reads bf16-rounded weights, relative
# rounding 2^-9) where bf16-mixed autocast keeps float32 weights for the ops it leaves in
# float32; 2% a step over 24 steps of a 4-block GPT-2, 1% before any update. At world size
# 1 FSDP1 runs NO_SHARD (torch warns "switching to use NO_SHARD"): the units and flat
# parameters are there, the shards are the whole; the record says NO_SHARD. Not run here
# (no GPU on this machine): it needs the session's H200.
STEP_TOLERANCE, FIRST_TOLERANCE = 0.02, 0.01


@pytest.fixture(scope="module")
def gpu_rank(tmp_path_factory):
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU")
    out = tmp_path_factory.mktemp("lightning_fsdp_gpu")
    (rank,) = ranks_written(out, WORKER, "cuda", nproc=1, timeout=300, NCCL_NVLS_ENABLE="0")
    return rank


@pytest.mark.gpu
@pytest.mark.distributed
def test_fsdp_strategy_on_one_gpu_trains_as_unsharded_and_the_report_says_fsdp1(gpu_rank) -> None:
    single, fsdp = gpu_rank["single"], gpu_rank["sharded"]
    assert fsdp["strategy"] == "FSDPStrategy" and single["strategy"] != "FSDPStrategy"
    found = fsdp["report"]["facts"]["sharding"]
    assert (found["kind"], found["blocks"], found["count"]) == ("fsdp1", "GPT2Block", 4), found
    assert found["sharding_strategy"] == "NO_SHARD", found  # world size 1 (above)
    if gpu_rank["plan_precision"] == "bf16":
        assert (found["param_dtype"], found["reduce_dtype"]) == ("bfloat16", "float32"), found
    assert "sharding" not in fsdp["report"]["notes"] and fsdp["report"]["steps"] == 24
    a, b = fsdp["losses"], single["losses"]
    assert len(a) == len(b) and fsdp["finite"] and single["finite"], (a, b)
    assert abs(a[0] - b[0]) <= FIRST_TOLERANCE * abs(b[0]), (a, b)
    worst = max(abs(x - y) / abs(y) for x, y in zip(a, b, strict=True))
    assert worst <= STEP_TOLERANCE, f"worst relative difference {worst:.2e}: {a} {b}"
    assert b[-1] < b[0], b
