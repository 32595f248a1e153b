"""benchmarks/sharding.py (issue 40): its CPU check run for real, two gloo ranks per
variant under torchrun, and what it plans to run on the H200 machines it is written for
(the planner's what-if of 2 and 4 H200s: no GPU needed)."""

from __future__ import annotations

import json
import sys

import pytest

from .distributed.torch_launch import ROOT, environment, run

sys.path.insert(0, str(ROOT / "benchmarks"))
import sharding

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("lightning")

SMOKE_VARIANTS = ["fit_plan", "fit_ddp", "fit_fsdp2", "hf_plan", "lightning_plan"]
SMOKE_VARIANTS.append("fit_fsdp2_float8")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """The docstring's CPU check: every variant in its own torchrun of 2 processes."""
    out = tmp_path_factory.mktemp("sharding") / "sharding.json"
    command = [sys.executable, str(ROOT / "benchmarks" / "sharding.py"), "--smoke"]
    command += ["--gpus", "2", "--single", "--variants", *SMOKE_VARIANTS, "--out", str(out)]
    done = run(command, environment(), timeout=240)
    assert done.returncode == 0, done.explain()
    return done, json.loads(out.read_text())


@pytest.mark.torch
@pytest.mark.distributed
def test_every_variant_has_numbers_or_the_reason_it_has_none(smoke) -> None:
    done, result = smoke
    rows = {row["variant"]: row for row in result["rows"]}
    assert list(rows) == [*SMOKE_VARIANTS[:3], "fit_single", *SMOKE_VARIANTS[3:]]
    for name, row in rows.items():
        if "step_ms" in row:
            assert row["tokens_per_s_per_gpu"] > 0 and row["rounds"] == 1, row
            assert len(row["step_ms_rounds"]) == 1 and not row["errors"], row
            assert row["report_tokens_per_s_per_gpu"] > 0, row
            # the CPU has no peak and no device memory: None, with accelkit's reason
            assert row["mfu"] is None and "no GPU" in row["notes"]["mfu"], row
            assert row["peak_memory_gb"] is None and row["notes"]["peak_memory_bytes"]
            assert row["planned_memory_gb"] is not None, row
        else:
            assert row.get("skipped") or row.get("error"), row
        assert f"| {name} |" in done.stdout
    assert "fit_plan is this run" in rows["fit_ddp"]["skipped"]


@pytest.mark.torch
@pytest.mark.distributed
def test_each_layout_is_the_one_asked_for_and_compared_with_the_plans(smoke) -> None:
    _, result = smoke
    rows = {row["variant"]: row for row in result["rows"]}
    assert rows["fit_plan"]["layout"] == "ddp" and rows["fit_plan"]["world_size"] == 2
    assert rows["fit_fsdp2"]["layout"] == "fsdp2" and rows["fit_fsdp2"]["world_size"] == 2
    assert rows["fit_single"]["layout"] == "none" and rows["fit_single"]["world_size"] == 1
    # the trainers cannot shard on the CPU; the plan here is DDP for them anyway
    assert rows["hf_plan"]["layout"] == rows["lightning_plan"]["layout"] == "ddp"
    assert rows["fit_plan"]["speed_vs_fit_plan"] == pytest.approx(1.0)
    for name in ("fit_fsdp2", "hf_plan", "lightning_plan"):
        assert rows[name]["speed_vs_fit_plan"] > 0
        assert rows[name]["scaling_vs_one_gpu"] > 0
    assert rows["fit_single"]["scaling_vs_one_gpu"] is None
    assert result["verdict"].startswith(("the plan's ddp", "fsdp2"))
    float8 = rows["fit_fsdp2_float8"]
    assert float8.get("skipped") or "emulated" in float8["notes"]["float8"], float8


@pytest.mark.torch
@pytest.mark.distributed
def test_the_children_run_with_nvlink_multicast_off(smoke) -> None:
    _, result = smoke
    assert result["multicast_env"] == sharding.MULTICAST_OFF
    assert result["nccl_env"]["NCCL_NVLS_ENABLE"] == "0"


def _h200_setting(model: str, gpus: int) -> tuple[dict, list[str]]:
    """What the benchmark would run on `gpus` H200s (the planner's what-if)."""
    args = sharding._arguments(
        ["--model", model, "--gpus", str(gpus), "--single", "--variants", *SMOKE_VARIANTS[:5]]
    )
    launched = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR")

    def h200s(ranks: int):
        import accelkit

        environ = {k: v for k, v in sharding.torchrun_environ(ranks).items() if k in launched}
        return accelkit.what_if("H200", gpus, environ=environ)

    return sharding.setting(args, h200s), args.variants


@pytest.mark.torch
@pytest.mark.parametrize("gpus", [2, 4])
def test_on_h200s_3b_compares_the_plans_ddp_with_fsdp2_and_one_gpu(gpus) -> None:
    found, variants = _h200_setting("3b", gpus)
    assert found["params"] == pytest.approx(3.21e9, rel=0.01)
    assert found["plans"]["fit_plan"].memory.choice == "ddp"
    runs = [v for v in variants if sharding.skip_reason(v, found) is None]
    assert runs == ["fit_plan", "fit_fsdp2", "fit_single", "hf_plan", "lightning_plan"]


@pytest.mark.torch
@pytest.mark.parametrize("gpus", [2, 4])
def test_on_h200s_8b_is_sharded_and_ddp_is_skipped_with_the_numbers(gpus) -> None:
    found, _ = _h200_setting("8b", gpus)
    assert found["params"] == pytest.approx(8.03e9, rel=0.01)
    assert found["plans"]["fit_plan"].memory.choice == "fsdp2"
    ddp = sharding.skip_reason("fit_ddp", found)
    assert "no layout that fits" in ddp and "GB" in ddp
    assert "fsdp2+offload" in sharding.skip_reason("fit_single", found)
    assert "fit_plan is this run" in sharding.skip_reason("fit_fsdp2", found)


def test_rounds_alternate_and_each_run_is_its_own_torchrun() -> None:
    assert sharding.schedule(["a", "b"], 3) == [
        (0, "a"), (0, "b"), (1, "b"), (1, "a"), (2, "a"), (2, "b"),
    ]  # fmt: skip
    args = sharding._arguments(["--model", "8b", "--gpus", "4"])
    line = sharding.command("hf_plan", args, deadline=400)
    assert line[:5] == ["-m", "torch.distributed.run", "--nproc-per-node", "4", "--standalone"]
    assert "--variant hf_plan --model 8b --batch-size 2 --seq-len 2048" in " ".join(line)
    assert sharding.command("fit_single", args, deadline=400)[3] == "1"
    assert line[-2:] == ["--deadline", "400"]
