"""FSDP2 on one CUDA GPU under torchrun (NCCL, world size 1): `accelkit.torch.fit` of a
GPT-2 small, and the Hugging Face `Trainer` with `training_arguments` of a plan that
shards, each against the same run unsharded in the same process (workers:
torch_fsdp_gpu_worker.py, tests/hf/fsdp_worker.py). The CPU counterparts:
test_torch_fsdp.py (the fit on two gloo ranks) and tests/hf/test_fsdp_launch.py (the
Trainer cannot shard on the CPU).

Tolerances, bf16 plans: the sharded run's loss at each step is the unsharded run's within
2% relative, its first loss (before any update) within 1%. The two compute in bf16
differently: FSDP2's policy gathers bf16 parameters, so every op (LayerNorms, embeddings
included) reads bf16-rounded weights (relative rounding 2^-9, about 0.2%), where autocast
keeps float32 weights for the ops it leaves in float32; on the CPU that difference
measured 0.23% after 16 steps (test_torch_fsdp.py, 1% allowed). 2% leaves room for 24
steps of a 12-block model while a wrong update (a step lost, gradients of another batch)
moves the memorised batches' loss by far more. At world size 1 the reduce-scatter sums
nothing: the difference is the rounding alone.
Each launch takes about 30 s on an H200 (NCCL_NVLS_ENABLE=0: NVLink SHARP is not needed
by one rank, and its setup can fail where multicast is off).
"""

from __future__ import annotations

import json

import pytest

from .torch_launch import ROOT, torchrun

pytest.importorskip("torch")

pytestmark = [pytest.mark.torch, pytest.mark.distributed, pytest.mark.gpu]

FIT_WORKER = str(ROOT / "tests" / "distributed" / "torch_fsdp_gpu_worker.py")
TRAINER_WORKER = str(ROOT / "tests" / "hf" / "fsdp_worker.py")
STEP_TOLERANCE, FIRST_TOLERANCE = 2e-2, 1e-2


def _launch(tmp_path_factory, name: str, *args: str) -> dict:
    out = tmp_path_factory.mktemp(name)
    done = torchrun(*args, str(out), nproc=1, timeout=300, NCCL_NVLS_ENABLE="0")
    assert done.returncode == 0, done.explain()
    return json.loads((out / "rank0.json").read_text())


@pytest.fixture(scope="module")
def fitted(tmp_path_factory) -> dict:
    return _launch(tmp_path_factory, "fsdp_fit_gpu", FIT_WORKER)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict:
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate", reason="the Trainer needs accelerate")
    return _launch(tmp_path_factory, "fsdp_trainer_gpu", TRAINER_WORKER, "cuda")


def _compare(sharded: list[float], single: list[float]) -> None:
    """The losses step by step, with the worst relative difference in the message."""
    assert len(sharded) == len(single), f"{len(sharded)} sharded steps, {len(single)} single"
    worst = max(abs(a - b) / abs(b) for a, b in zip(sharded, single, strict=True))
    table = "\n".join(f"  {a:.5f} {b:.5f}" for a, b in zip(sharded, single, strict=True))
    detail = f"worst relative difference {worst:.2e}; sharded, single:\n{table}"
    assert abs(sharded[0] - single[0]) <= FIRST_TOLERANCE * abs(single[0]), detail
    assert worst <= STEP_TOLERANCE, detail


def _sharding_record(report: dict) -> dict:
    found = report["facts"].get("sharding")
    assert found is not None, (
        f"no facts['sharding']; notes: {report['notes'].get('sharding')!r}, "
        f"facts: {sorted(report['facts'])}"
    )
    return found


# -- accelkit.torch.fit ---------------------------------------------------------------


def test_fit_shards_gpt2_with_fsdp2_at_world_size_one(fitted) -> None:
    sharded = fitted["sharded"]
    record = _sharding_record(sharded["report"])
    assert sharded["parameter"] == "DTensor", f"parameters are {sharded['parameter']}"
    assert fitted["precision"] == "bf16", fitted["precision"]
    expected = {"kind": "fsdp2", "blocks": "GPT2Block", "count": 12, "where": "transformer.h"}
    expected.update(param_dtype="bfloat16", reduce_dtype="float32", by_script=False)
    assert {k: record[k] for k in expected} == expected, record


def test_fit_sharded_trains_to_the_losses_of_the_unsharded_fit(fitted) -> None:
    sharded, single = fitted["sharded"], fitted["single"]
    assert sharded["finite"] and single["finite"], (sharded["losses"], single["losses"])
    _compare(sharded["losses"], single["losses"])
    epochs = sharded["report"]["losses"]
    assert epochs[-1] < epochs[0], f"the epochs' mean losses did not fall: {epochs}"


def test_fit_reports_the_predicted_and_the_measured_memory(fitted) -> None:
    report = fitted["sharded"]["report"]
    facts, peak = report["facts"], report["peak_memory_bytes"]
    predicted = facts.get("predicted_memory_bytes")
    allocator = fitted["sharded"]["peak_allocated"]
    detail = (
        f"predicted {predicted}, measured peak {peak} (allocator {allocator}), "
        f"plan {fitted['plan_memory']}, choice {facts.get('memory_choice')}, "
        f"notes {report['notes']}"
    )
    assert predicted and predicted > 0, detail
    assert peak and peak > 2 * fitted["params"], detail  # at least the bf16 weights
    assert report["world_size"] == 1 and report["steps"] == 24, report["steps"]


# -- the Hugging Face Trainer -------------------------------------------------------------


def test_the_trainer_shards_with_fsdp2_from_training_arguments(trained) -> None:
    sharded = trained["sharded"]
    assert trained["plan_precision"] == "bf16", trained["plan_precision"]
    assert (sharded["distributed_type"], sharded["fsdp_enabled"]) == ("FSDP", True), sharded
    assert sharded["parameter"] == "DTensor", f"parameters are {sharded['parameter']}"
    record = _sharding_record(sharded["report"])
    # Accelerate's bf16 policy reduces in bf16 (TrainingArguments cannot pass one that
    # reduces in float32, as accelkit.torch.fit does): docs/integrations.md says so.
    expected = {"kind": "fsdp2", "blocks": "GPT2Block", "count": 4, "where": "transformer.h"}
    expected.update(param_dtype="bfloat16", reduce_dtype="bfloat16", by_script=True)
    expected.update(checkpointing=False, offload=False)
    assert {k: record[k] for k in expected} == expected, record


def test_the_sharded_trainer_trains_to_the_losses_of_the_unsharded(trained) -> None:
    sharded, single = trained["sharded"], trained["single"]
    assert single["distributed_type"] != "FSDP", single["distributed_type"]
    assert sharded["finite"] and single["finite"], (sharded["losses"], single["losses"])
    assert len(sharded["losses"]) == 24, sharded["losses"]
    _compare(sharded["losses"], single["losses"])
    assert sharded["losses"][-1] < sharded["losses"][0], sharded["losses"]


def test_the_callbacks_report_of_the_sharded_trainer_is_whole(trained) -> None:
    report = trained["sharded"]["report"]
    figures = {
        k: report[k] for k in ("steps", "world_size", "samples_per_second", "flops_per_step", "mfu")
    }
    figures["peak_memory_bytes"] = report["peak_memory_bytes"]
    detail = f"{figures}; notes {report['notes']}"
    assert figures["steps"] == 24 and figures["world_size"] == 1, detail
    for name in ("samples_per_second", "flops_per_step", "mfu", "peak_memory_bytes"):
        assert figures[name] is not None and figures[name] > 0, detail
    assert "sharding" not in report["notes"], detail
