"""The PyTorch data-parallel pieces in one process: the adapter's order and timeout,
the sampler, the single-device reference, rank-0 saving, the torchrun hint."""

from __future__ import annotations

import datetime
import json
import os

import pytest

import accelkit
from accelkit import plan_for
from accelkit.frameworks import _common, torch_adapter
from accelkit.hardware import environment
from accelkit.hardware.info import GpuInfo, HardwareInfo, LauncherEnv, Link
from accelkit.planning import Request, Status, plan
from accelkit.profiling import world
from accelkit.profiling.run_report import RunReport

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from accelkit.torch.distributed import parallel

from ..helpers.torch_data import CPU_PLAN, mlp, separable, train

TORCHRUN = LauncherEnv(rank=0, local_rank=0, world_size=2, local_world_size=2)
# Two GPUs that cannot reach each other: the plan sets NCCL_P2P_DISABLE.
NO_P2P = HardwareInfo(
    gpus=(
        GpuInfo(0, "NVIDIA GeForce RTX 4090", compute_capability=(8, 9)),
        GpuInfo(1, "NVIDIA GeForce RTX 4090", compute_capability=(8, 9)),
    ),
    links=(Link(0, 1, p2p=False, nvlink=False),),
    launcher=TORCHRUN,
    source="snapshot",
)


@pytest.fixture(autouse=True)
def clean_state(monkeypatch):
    for name in (
        "NCCL_P2P_DISABLE",
        "ACCELKIT_DIST_TIMEOUT",
        "RANK",
        "WORLD_SIZE",
        "PYTORCH_CUDA_ALLOC_CONF",
        "PYTORCH_ALLOC_CONF",
    ):
        monkeypatch.delenv(name, raising=False)
    saved = torch.backends.cudnn.benchmark
    _common._ours.clear()
    yield
    _common._ours.clear()
    for name in ("NCCL_P2P_DISABLE", "PYTORCH_CUDA_ALLOC_CONF"):
        os.environ.pop(name, None)
    torch.backends.cudnn.benchmark = saved
    torch.backends.cuda.matmul.fp32_precision = "none"


@pytest.fixture
def fake_init(monkeypatch):
    """Record what init_process_group saw instead of starting a group."""
    seen: list[dict] = []

    def init(backend, timeout):
        seen.append(
            {
                "backend": backend,
                "timeout": timeout,
                "NCCL_P2P_DISABLE": os.environ.get("NCCL_P2P_DISABLE"),
                "after_device": list(calls),
            }
        )

    calls: list[str] = []
    monkeypatch.setattr(torch.distributed, "init_process_group", init)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda: 2)
    monkeypatch.setattr(torch_adapter.atexit, "register", lambda *a: None)
    monkeypatch.setattr(
        torch_adapter, "apply_device", lambda s: calls.append("set_device") or (Status.APPLIED, "")
    )
    return seen


# -- the adapter ---------------------------------------------------------------------------


def test_nccl_variables_and_the_device_come_before_the_process_group(fake_init) -> None:
    planned = plan(NO_P2P, Request())
    keys = [s.key for s in planned.settings]
    # The planner lists the process group before the NCCL variable ...
    assert keys.index("torch.distributed.backend") < keys.index("NCCL_P2P_DISABLE")
    result = accelkit.apply(planned)
    # ... the adapter sets the variable and the device first, and keeps the plan's order.
    backend_used = "nccl" if torch.cuda.is_available() else "gloo"  # gloo without CUDA
    assert fake_init == [
        {
            "backend": backend_used,
            "timeout": datetime.timedelta(seconds=600),
            "NCCL_P2P_DISABLE": "1",
            "after_device": ["set_device"],
        }
    ]
    assert [s.key for s in result.settings] == keys
    assert result.get("NCCL_P2P_DISABLE").status is Status.APPLIED
    backend = result.get("torch.distributed.backend")
    assert backend.status is Status.APPLIED and "timeout 600 s" in backend.detail


def test_a_user_value_for_an_nccl_variable_is_kept(fake_init, monkeypatch) -> None:
    monkeypatch.setenv("NCCL_P2P_DISABLE", "0")
    result = accelkit.apply(plan(NO_P2P, Request()))
    assert os.environ["NCCL_P2P_DISABLE"] == "0" and fake_init[0]["NCCL_P2P_DISABLE"] == "0"
    assert result.get("NCCL_P2P_DISABLE").status is Status.KEPT_USER_VALUE


def test_the_timeout_comes_from_accelkit_dist_timeout(fake_init, monkeypatch) -> None:
    monkeypatch.setenv("ACCELKIT_DIST_TIMEOUT", "7.5")
    result = accelkit.apply(plan(NO_P2P, Request()))
    assert fake_init[0]["timeout"] == datetime.timedelta(seconds=7.5)
    assert "timeout 7.5 s" in result.get("torch.distributed.backend").detail


@pytest.mark.parametrize("text", ["soon", "0", "-3", "nan"])
def test_a_bad_timeout_falls_back_to_the_default_and_says_so(text) -> None:
    seconds, note, _ = environment.dist_timeout({"ACCELKIT_DIST_TIMEOUT": text})
    assert seconds == 600.0 and f"ACCELKIT_DIST_TIMEOUT={text!r}" in note


@pytest.mark.parametrize("text", ["inf", "1e13"])  # 1e13: faults4 E10
def test_never_timing_out_is_the_longest_timeout_pytorch_keeps(text) -> None:
    seconds, note, _ = environment.dist_timeout({"ACCELKIT_DIST_TIMEOUT": text})
    assert seconds == environment.MAX_TIMEOUT_S and f"ACCELKIT_DIST_TIMEOUT={text!r}" in note


def test_a_rendezvous_that_fails_is_could_not_apply_with_the_reason(monkeypatch) -> None:
    def init(backend, timeout):
        raise RuntimeError("Timed out after 6 seconds waiting for clients. 1/2 clients joined.")

    monkeypatch.setattr(torch.distributed, "init_process_group", init)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("ACCELKIT_DIST_TIMEOUT", "5")
    result = accelkit.apply(plan(NO_P2P, Request()))
    backend = result.get("torch.distributed.backend")
    assert backend.status is Status.FAILED
    assert backend.detail.startswith(
        "the process group did not start within 5 s "
        "(ACCELKIT_DIST_TIMEOUT): RuntimeError: Timed out after"
    )
    assert "1/2 clients joined. Check that all WORLD_SIZE=2 processes started" in backend.detail
    assert result.get("NCCL_P2P_DISABLE").status is Status.APPLIED  # the rest still applied


def test_nvlink_multicast_is_never_set(fake_init) -> None:
    result = accelkit.apply(
        plan_for(
            "H100 SXM",
            8,
            environ={"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8"},
        )
    )
    assert "NCCL_NVLS_ENABLE" not in os.environ
    assert all(s.key != "NCCL_NVLS_ENABLE" for s in result.settings)


# -- the sampler ---------------------------------------------------------------------------


def _dataset(n: int = 10):
    return torch.utils.data.TensorDataset(torch.arange(float(n)))


def _collate(batch):
    return torch.stack([item[0] for item in batch])


def _seen(loader) -> list[float]:
    return sorted(float(v) for batch in loader for v in batch)


def test_shard_splits_a_shuffled_loader_and_keeps_its_settings() -> None:
    generator = torch.Generator().manual_seed(3)
    loader = torch.utils.data.DataLoader(
        _dataset(),
        batch_size=2,
        shuffle=True,
        collate_fn=_collate,
        drop_last=False,
        generator=generator,
        num_workers=0,
    )
    shards = [parallel.shard(loader, parallel.World(rank, 2, "gloo")) for rank in (0, 1)]
    for rank, (rebuilt, why) in enumerate(shards):
        sampler = rebuilt.sampler
        assert isinstance(sampler, torch.utils.data.distributed.DistributedSampler)
        assert sampler.shuffle and sampler.rank == rank and sampler.num_replicas == 2
        assert rebuilt.batch_size == 2 and rebuilt.collate_fn is _collate
        assert rebuilt.generator is generator and len(rebuilt) == 3
        assert f"rank {rank} of 2 trains on 5 of 10 samples per epoch, shuffled" in why
    first, second = (_seen(rebuilt) for rebuilt, _ in shards)
    assert not set(first) & set(second) and sorted(first + second) == [float(i) for i in range(10)]


def test_shard_keeps_worker_settings() -> None:
    loader = torch.utils.data.DataLoader(
        _dataset(),
        batch_size=4,
        num_workers=2,
        persistent_workers=True,
        prefetch_factor=3,
        pin_memory=False,
        drop_last=True,
        worker_init_fn=print,
        timeout=7,
    )
    rebuilt, why = parallel.shard(loader, parallel.World(1, 2, "gloo"))
    assert not rebuilt.sampler.shuffle and "in order" in why
    assert (rebuilt.num_workers, rebuilt.persistent_workers, rebuilt.prefetch_factor) == (
        2,
        True,
        3,
    )
    assert rebuilt.drop_last and rebuilt.worker_init_fn is print and rebuilt.timeout == 7


def test_set_epoch_reshuffles_the_same_way_on_every_rank() -> None:
    loader = torch.utils.data.DataLoader(_dataset(100), batch_size=100, shuffle=True)
    rebuilt, _ = parallel.shard(loader, parallel.World(0, 2, "gloo"))
    orders = []
    for epoch in (0, 1, 1):
        parallel.set_epoch(rebuilt, epoch)
        orders.append(next(iter(rebuilt))[0].tolist())
    assert orders[0] != orders[1] and orders[1] == orders[2]


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (
            lambda d: torch.utils.data.DataLoader(
                d,
                sampler=torch.utils.data.distributed.DistributedSampler(d, num_replicas=2, rank=0),
            ),
            "already has a DistributedSampler",
        ),
        (
            lambda d: torch.utils.data.DataLoader(
                d, sampler=torch.utils.data.WeightedRandomSampler([1.0] * len(d), len(d))
            ),
            "custom sampler (WeightedRandomSampler)",
        ),
        (
            lambda d: torch.utils.data.DataLoader(d, batch_sampler=[[0, 1], [2, 3]]),
            "custom batch_sampler",
        ),
        (lambda d: [d[0], d[1]], "list is not a DataLoader"),
    ],
)
def test_shard_leaves_what_it_cannot_split_and_says_why(make, reason) -> None:
    loader = make(_dataset())
    rebuilt, why = parallel.shard(loader, parallel.World(0, 2, "gloo"))
    assert rebuilt is loader and reason in why


def test_shard_leaves_an_iterable_dataset() -> None:
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(4))

    loader = torch.utils.data.DataLoader(Stream(), batch_size=2)
    rebuilt, why = parallel.shard(loader, parallel.World(0, 2, "gloo"))
    assert rebuilt is loader and "IterableDataset" in why


def test_without_a_process_group_there_is_no_world() -> None:
    assert parallel.world() is None and parallel.is_rank_zero()


# -- the single-device reference -------------------------------------------------------------


def _report(**figures) -> RunReport:
    return RunReport(
        framework="torch", model="m", device="cpu", precision="fp32", matmul_dtype="fp32", **figures
    )


def test_single_device_from_a_number_a_report_or_its_file(tmp_path) -> None:
    assert world.single_device_rate(None) is None
    assert world.single_device_rate(250) == 250.0
    one = _report(samples_per_second=321.0)
    assert world.single_device_rate(one) == 321.0
    path = tmp_path / "one.json"
    one.save(path)
    assert world.single_device_rate(path) == 321.0
    assert world.single_device_rate(str(path)) == 321.0


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (0, ValueError, "must be samples/s > 0"),
        (-1.0, ValueError, "must be samples/s > 0"),
        (True, TypeError, "give a RunReport"),
        ([1.0], TypeError, "got list"),
        ("/nonexistent/run.json", ValueError, "No such file"),
    ],
)
def test_single_device_bad_values_are_clear_errors(value, error, message) -> None:
    with pytest.raises(error, match=message):
        world.single_device_rate(value)


def test_single_device_refuses_a_multi_device_or_unmeasured_report() -> None:
    with pytest.raises(ValueError, match="ran on 2 devices"):
        world.single_device_rate(_report(samples_per_second=5.0, world_size=2))
    with pytest.raises(ValueError, match="no steady-state samples/s"):
        world.single_device_rate(_report())


# -- fit, save, bench --------------------------------------------------------------------------


def _fit(plan_=None, **kwargs):
    """Eight steps of a tiny MLP, each measured (warm-up 1, window 2)."""
    return train(
        mlp(8, 16, 2),
        separable(n=64, dim=8, classes=2, batch=8),
        optimizer=torch.optim.SGD,
        lr=0.1,
        plan=plan_ or CPU_PLAN,
        warmup=1,
        window=2,
        **kwargs,
    )


def test_fit_with_several_gpus_and_no_launcher_prints_the_torchrun_command(capsys) -> None:
    four = plan_for("A100-SXM4-80GB", 4, precision="fp32")
    _fit(four, progress=True)
    err = capsys.readouterr().err
    assert "planned as launched by torchrun" in err
    assert "torchrun --nproc-per-node 4 your_script.py" in err
    assert "torchrun --nproc-per-node 4 your_script.py" in four.get("launch").value
    _fit(four, progress=False)
    assert "torchrun" not in capsys.readouterr().err


def test_fit_after_a_failed_rendezvous_trains_alone_and_says_why(capsys) -> None:
    planned = plan(HardwareInfo(launcher=TORCHRUN, source="snapshot"), Request())
    failed = planned.with_settings(
        [
            s.with_status(Status.FAILED, "the process group did not start within 5 s")
            if s.key == "torch.distributed.backend"
            else s
            for s in planned.settings
        ]
    )
    report = _fit(failed, progress=False)
    err = capsys.readouterr().err
    assert (
        "accelkit: trained this process alone, without DistributedDataParallel: the "
        "process group did not start within 5 s"
    ) in err
    assert report.world_size == 1 and "did not start" in report.notes["world_size"]
    assert report.steps == 8  # the whole data set


def test_fit_under_a_launcher_without_a_process_group_says_so(capsys, monkeypatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")  # e.g. ACCELKIT_DISABLE=1 under torchrun
    report = _fit(progress=False)
    err = capsys.readouterr().err
    assert "WORLD_SIZE=2 but no process group is initialised" in err
    assert "init_process_group()" in report.notes["world_size"]


def test_fit_single_device_gives_the_efficiency_of_one_process() -> None:
    report = _fit(single_device=1e9, progress=False)
    assert report.single_device_samples_per_second == 1e9
    assert report.scaling_efficiency == pytest.approx(report.samples_per_second / 1e9)
    with pytest.raises(ValueError, match="single_device"):
        _fit(single_device=-1)


def test_save_writes_on_rank_zero_only_unless_asked(tmp_path, monkeypatch) -> None:
    report = _report(samples_per_second=1.0)
    monkeypatch.setenv("RANK", "1")
    assert report.save(tmp_path / "a.json") is False and not (tmp_path / "a.json").exists()
    assert report.save(tmp_path / "b.json", every_rank=True) is True
    monkeypatch.setenv("RANK", "0")
    assert report.save(tmp_path / "c.json") is True
    assert RunReport.load(tmp_path / "c.json").samples_per_second == 1.0


def bench(*options: str) -> int:
    """``accelkit bench`` of a tiny MLP for 4 steps, with `options`: its exit code."""
    from accelkit.cli import main

    return main(["bench", "--model", "mlp", "--framework", "torch", "--steps", "4", *options])


def test_bench_compare_single_without_a_launcher_is_a_note(capsys) -> None:
    assert bench("--batch-size", "8", "--compare-single", "--json") == 0
    document = json.loads(capsys.readouterr().out)
    assert document["world_size"] == 1 and document["scaling_efficiency"] is None
    assert "nothing to compare" in document["notes"]["scaling_efficiency"]
    assert (
        "torchrun --nproc-per-node N -m accelkit bench --compare-single"
        in document["notes"]["scaling_efficiency"]
    )


def test_bench_single_device_from_the_command_line(capsys) -> None:
    assert bench("--batch-size", "8", "--single-device", "1e9", "--json") == 0
    document = json.loads(capsys.readouterr().out)
    assert document["single_device_samples_per_second"] == 1e9
    assert bench("--single-device", "/nonexistent.json") == 2
    assert "single_device='/nonexistent.json'" in capsys.readouterr().err
