"""Advice that reads true (issue 37): each verdict below once said something its own
figures or the run contradicted."""

from __future__ import annotations

from typing import Any

from accelkit import what_if
from accelkit.advisor import advise
from accelkit.advisor.context import Context
from accelkit.advisor.rules import input_wait, memory, utilisation
from accelkit.hardware.info import HardwareInfo

from .helpers import measured_on

H200, A100 = what_if("H200"), what_if("A100-SXM4-80GB")
CPU = HardwareInfo(source="cpu", cpu_count=8)
BF16 = {"precision": "bf16", "matmul_dtype": "bf16"}


def _graphs_kept() -> dict[str, Any]:
    """tune's record of a Lightning run that kept compile with CUDA graphs."""
    return {
        "decision": "tuned",
        "candidates": [
            {"name": "eager", "status": "baseline", "step_seconds": 0.030,
             "settings": {"compile": False, "optimizer": "default"}},
            {"name": "compile", "status": "slower", "step_seconds": 0.026,
             "settings": {"compile": True, "optimizer": "default"}},
            {"name": "compile+cudagraphs", "status": "chosen", "step_seconds": 0.021,
             "settings": {"compile": True, "optimizer": "default", "cudagraphs": True}},
        ],
    }  # fmt: skip


def test_the_profiler_snippet_calls_the_profiler_it_binds() -> None:
    found = advise(H200, None, measured_on(H200, mfu=0.12, step_time_s=0.05, **BF16))
    action = next(a for a in found if a.id == "low_mfu").action
    assert "as prof:" in action and "prof.key_averages()" in action
    assert " as p:" not in action and "p.step()" not in action.replace("prof.step()", "")


def test_a_compiled_run_is_not_told_to_compile_for_fusion() -> None:
    # facts["compiled"]: accelkit.torch.fit's record of the step it went on with (a
    # Meter's run has none; where it is False, the compilation rule speaks instead)
    for facts, says in (({}, "fusion (compile=True) removes"), ({"compiled": True}, "left")):
        m = measured_on(A100, mfu=0.12, step_time_s=0.05, facts=facts, **BF16)
        [low] = advise(A100, None, m)
        assert low.id == "low_mfu" and says in low.action
        assert not facts or "compile=True" not in low.action


def test_low_mfu_alone_says_no_rule_above() -> None:
    found = advise(A100, None, measured_on(A100, mfu=0.12, step_time_s=0.05, **BF16))
    assert [a.id for a in found] == ["low_mfu"]
    assert "above" not in found[0].title


def test_low_mfu_under_other_verdicts_still_points_above() -> None:
    m = measured_on(A100, mfu=0.12, input_wait_share=0.06, step_time_s=0.05, **BF16)
    found = advise(A100, None, m)
    assert found[-1].id == "low_mfu" and len(found) > 1
    assert "no rule above explains it" in found[-1].title


def test_a_gain_below_the_changes_bound_is_not_called_at_most_that_bound() -> None:
    m = measured_on(H200, input_wait_share=0.057, facts={"loader": {"type": "DataLoader"}})
    gain = input_wait.input_bound(Context.build(H200, None, m)).expected_gain
    assert gain.startswith("up to 1.06x") and "at most 3.00x" not in gain


def test_a_tf_data_pipeline_without_a_map_is_not_said_to_map_in_parallel() -> None:
    loader = {"type": "tf.data.Dataset", "map": False, "prefetch": True, "cache": False}
    m = measured_on(CPU, framework="tensorflow", input_wait_share=0.3, facts={"loader": loader})
    found = input_wait.input_bound(Context.build(CPU, None, m))
    assert "map already runs in parallel" not in found.expected_gain
    assert "no map" in found.expected_gain


def test_a_tensor_dataset_gets_batched_fetches_not_workers() -> None:
    loader = {"type": "DataLoader", "dataset": "TensorDataset", "num_workers": 0,
              "batch_size": 64}  # fmt: skip
    m = measured_on(H200, input_wait_share=0.3, facts={"loader": loader})
    found = input_wait.input_bound(Context.build(H200, None, m))
    assert "num_workers" not in found.action
    assert "BatchSampler" in found.action and "batch_size=None" in found.action
    assert "TensorDataset" in found.action


def test_launch_overhead_says_what_tune_kept_and_does_not_advise_it_again() -> None:
    m = measured_on(H200, gpu_utilization=43.0, input_wait_share=0.01, step_time_s=0.021,
                    facts={"batch_size": 64}, tuning=_graphs_kept())  # fmt: skip
    found = utilisation.launch_overhead(Context.build(H200, None, m))
    assert "compile+cudagraphs" in found.title and "CUDA graphs tune kept" in found.title
    assert "compile=True" not in found.action and "tune=True" not in found.action
    assert "CUDA graphs are on already" in found.action
    assert found.evidence["tune.kept"].startswith("kept compile+cudagraphs")


def test_launch_overhead_without_tune_is_unchanged_in_what_it_advises() -> None:
    m = measured_on(H200, gpu_utilization=43.0, input_wait_share=0.01, step_time_s=0.004,
                    facts={"batch_size": 64, "compiled": False})  # fmt: skip
    found = utilisation.launch_overhead(Context.build(H200, None, m))
    assert "compile=True" in found.action and "tune" not in found.title


def test_a_batch_far_beyond_the_measured_one_is_capped_and_says_so() -> None:
    # the run: ResNet-50 B64 peaking at 1% of an H200
    m = measured_on(H200, peak_memory_bytes=int(1.87e9), facts={"batch_size": 64})
    found = memory.memory(Context.build(H200, None, m))
    cap = memory.MAX_GROWTH * 64
    assert found.evidence["batch_that_fits"] == cap
    assert found.evidence["batch_memory_allows"] > cap
    assert f"batch_size={cap}" in found.action
    assert f"a batch of {cap} fits" in found.title and "5," not in found.title


def test_a_batch_within_the_cap_is_memorys_own_figure() -> None:
    m = measured_on(H200, peak_memory_bytes=int(40e9), facts={"batch_size": 64})
    found = memory.memory(Context.build(H200, None, m))
    assert found.evidence["batch_that_fits"] == memory.memory_allows(Context.build(H200, None, m))
    assert "batch_memory_allows" not in found.evidence
