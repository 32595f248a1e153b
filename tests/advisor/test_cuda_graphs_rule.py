"""The `cuda_graphs` rule on plain data: the CUDA-graphs lever a run left unused, with
the figure `tune` measured for it (kept / dropped by the check / timed faster but not kept
/ not tried / tune not run), and tuning records saved before the check's figures."""

from __future__ import annotations

import copy
import json

import pytest

from accelkit import what_if
from accelkit.advisor import Severity, advise
from accelkit.advisor.context import Context
from accelkit.advisor.rules import cuda_graphs
from accelkit.hardware.info import HardwareInfo
from accelkit.profiling.tuning import Check, TuneResult

from .helpers import ids, measured_on

H200 = what_if("H200")
CPU = HardwareInfo(source="cpu")
FIT = {"compiled": False}
# The H200 ResNet-50 B64 run of docs/benchmarks.md: the CUDA-graph candidate's gradients
# were 11.4% of the eager gradients' norm away, past the 10% limit.
PASSED = {
    "loss_difference": 0.0021,
    "loss_limit": 0.02,
    "grad_difference": 0.031,
    "grad_limit": 0.1,
    "grad_spread": None,
    "grad_agreement": None,
    "agreement_limit": None,
    "failed": None,
}
FAILED = dict(PASSED, grad_difference=0.114, failed="gradients")


def candidate(name, status, step, *, compile_=False, graphs=False, why="", check=None):
    settings = {"compile": compile_, "optimizer": "default"}
    if graphs:
        settings["cudagraphs"] = True
    return {
        "name": name,
        "settings": settings,
        "status": status,
        "step_seconds": step,
        "spread": None if step is None else [step * 0.98, step * 1.02],
        "steps": 10,
        "compile_seconds": 20.0 if compile_ and step else None,
        "why": why,
        "check": check,
    }


def tuned(*candidates, decision="tuned"):
    return {"decision": decision, "seconds": 60.0, "steps": 40, "candidates": list(candidates)}


EAGER = candidate("eager", "baseline", 0.024)
COMPILE_SLOWER = candidate(
    "compile", "slower", 0.0235, compile_=True, why="not clearly faster", check=PASSED
)


def verdict(hardware=H200, **figures):
    figures.setdefault("facts", dict(FIT))
    return cuda_graphs.cuda_graphs(Context.build(hardware, None, measured_on(hardware, **figures)))


def test_kept_cuda_graphs_leave_nothing_to_say() -> None:
    graphs = candidate("cudagraphs", "chosen", 0.015, compile_=True, graphs=True, check=PASSED)
    assert verdict(gpu_utilization=55.0, tuning=tuned(EAGER, COMPILE_SLOWER, graphs)) is None
    assert TuneResult.from_dict(tuned(EAGER, COMPILE_SLOWER, graphs)).cudagraphs


def test_dropped_by_the_check_names_the_check_and_its_figure_beside_compile_alone() -> None:
    graphs = candidate(
        "cudagraphs",
        "failed",
        None,
        compile_=True,
        graphs=True,
        check=FAILED,
        why="gradients differ from the eager step's on the same batch",
    )
    found = verdict(gpu_utilization=58.0, tuning=tuned(EAGER, COMPILE_SLOWER, graphs))
    assert found.id == "cuda_graphs" and found.severity is Severity.INFO
    assert "gradients check" in found.title and "gradients 11.4% > 10%" in found.title
    assert "torch.compile alone: loss 0.21% <= 2%, gradients 3.1% <= 10%" in found.title
    assert found.evidence["tune.check.grad_difference"] == 0.114
    assert found.evidence["tune.check.failed"] == "gradients"
    assert found.evidence["tune.compile.check.grad_difference"] == 0.031
    assert "mode='reduce-overhead'" in found.action and "cudagraph_mark_step_begin" in found.action
    assert found.speedup is None and found.expected_gain.startswith("not measured")


def test_dropped_by_an_error_says_the_error() -> None:
    why = "InternalTorchDynamoError: cudagraph trees do not support this op"
    graphs = candidate("cudagraphs", "failed", None, compile_=True, graphs=True, why=why)
    found = verdict(gpu_utilization=58.0, tuning=tuned(EAGER, COMPILE_SLOWER, graphs))
    assert why in found.title and found.speedup is None
    assert "tune.check.failed" not in found.evidence
    assert "same shapes every step" in found.action


OUT_OF_MEMORY = candidate(
    "cudagraphs+fused", "failed", None, compile_=True, graphs=True, why="out of memory"
)


def test_out_of_memory_on_a_launch_bound_step_says_what_leaves_room() -> None:
    found = verdict(gpu_utilization=58.0, tuning=tuned(EAGER, COMPILE_SLOWER, OUT_OF_MEMORY))
    assert found.title == (
        "CUDA graphs ran out of memory in tune's 'cudagraphs+fused' trial: their memory "
        "pool did not fit beside the step"
    )
    assert "smaller batch" in found.action and "gradient accumulation" in found.action
    assert found.speedup is None and found.evidence["tune.why"] == "out of memory"


@pytest.mark.parametrize("figures", [{"gpu_utilization": 99.0}, {"step_time_s": 0.29}])
def test_out_of_memory_on_a_busy_step_is_quiet(figures) -> None:
    """A Llama-3.2-1B at 8 x 2048 on an H100: the graphs' trial ran out of memory on a
    step of 290 ms (docs/benchmarks.md); graphs would gain little there, fitting or not."""
    assert verdict(**figures, tuning=tuned(EAGER, COMPILE_SLOWER, OUT_OF_MEMORY)) is None


def test_timed_faster_but_not_kept_gives_the_measured_ratio() -> None:
    graphs = candidate(
        "cudagraphs",
        "skipped",
        0.016,
        compile_=True,
        graphs=True,
        check=PASSED,
        why="the data ended after 6 of its steps",
    )
    found = verdict(gpu_utilization=58.0, tuning=tuned(EAGER, COMPILE_SLOWER, graphs))
    assert found.severity is Severity.WARNING
    assert found.speedup == pytest.approx(0.024 / 0.016)
    assert "1.50x faster than the kept 'eager'" in found.title
    assert "measured 1.50x: 24.00 ms 'eager' / 16.00 ms 'cudagraphs'" in found.expected_gain
    assert found.evidence["tune.kept"] == "eager" and found.evidence["tune.step_ms"] == 16.0
    assert "tune=True" in found.action


@pytest.mark.parametrize("step", [0.0236, 0.030])
def test_timed_not_clearly_faster_or_slower_is_quiet(step) -> None:
    graphs = candidate("cudagraphs", "slower", step, compile_=True, graphs=True, check=PASSED)
    assert verdict(gpu_utilization=58.0, tuning=tuned(EAGER, COMPILE_SLOWER, graphs)) is None


def test_not_tried_because_the_script_fixed_compile_says_why_and_claims_nothing() -> None:
    skipped = candidate("cudagraphs", "skipped", None, why="compile=True was set by the script")
    skipped["settings"] = {}
    found = verdict(gpu_utilization=45.0, tuning=tuned(EAGER, skipped))
    assert "busy 45% of the time" in found.title
    assert "compile=True was set by the script" in found.title
    assert found.speedup is None and "not measured" in found.expected_gain
    assert "compile= left unset" in found.action and "tune=True" in found.action


def test_tune_not_run_on_a_launch_bound_step_says_how_to_measure() -> None:
    found = verdict(gpu_utilization=50.0, step_time_s=0.024)
    assert found.evidence["tune"] == "not run" and "tune did not run (tune=False)" in found.title
    assert found.speedup is None and "tune=True" in found.expected_gain
    meter = verdict(gpu_utilization=50.0, facts={})  # a Meter: a hand loop's or a callback's
    assert "accelkit.torch.tune(" in meter.action and "reduce-overhead" in meter.action
    assert "AccelkitCallback(tune=True)" in meter.action  # the trainers try them too
    assert "(a hand-written loop)" in meter.title
    short = verdict(step_time_s=0.004)  # no NVML samples: the step's length tells
    assert "steps of 4.0 ms" in short.title


def test_tune_that_decided_not_to_tune_gives_its_decision() -> None:
    record = tuned(EAGER, decision="not tuned: the run is estimated at 50 s")
    found = verdict(gpu_utilization=50.0, tuning=record)
    assert "estimated at 50 s" in found.title and found.evidence["tune.decision"].startswith("not")


@pytest.mark.parametrize(
    "figures",
    [
        {"gpu_utilization": 95.0, "step_time_s": 0.004},  # busy: not launch-bound
        {"gpu_utilization": 40.0, "input_wait_share": 0.4},  # input-bound: that rule speaks
        {"step_time_s": 0.05},  # long steps, no NVML: nothing says launch-bound
        {"gpu_utilization": 40.0, "world_size": 2},  # DDP: its all-reduce is outside graphs
        {"gpu_utilization": 40.0, "facts": {"compiled": False, "distributed": True}},
        {"gpu_utilization": 40.0, "framework": "tensorflow"},
    ],
)
def test_quiet_where_the_lever_does_not_apply(figures) -> None:
    assert verdict(**figures) is None


def test_a_cpu_run_is_quiet() -> None:
    assert verdict(CPU, step_time_s=0.001) is None


def test_a_tuning_record_saved_before_the_check_figures_loads_and_advises() -> None:
    old = copy.deepcopy(tuned(EAGER, COMPILE_SLOWER))
    for c in old["candidates"]:
        del c["check"]
    result = TuneResult.from_dict(json.loads(json.dumps(old)))
    assert all(t.check is None for t in result.trials) and not result.cudagraphs
    assert result.to_dict()["candidates"][1]["check"] is None
    found = verdict(gpu_utilization=50.0, tuning=old)  # tuned, no CUDA-graph candidate
    assert "tried no CUDA-graph candidate" in found.title


def test_a_saved_check_reads_back_as_it_was() -> None:
    result = TuneResult.from_dict(tuned(EAGER, COMPILE_SLOWER))
    assert result.trials[1].check == Check(**PASSED)
    assert result.to_dict()["candidates"][1]["check"] == PASSED


def test_registered_after_compile_and_silent_without_a_gpu_in_advise() -> None:
    graphs = candidate("cudagraphs", "failed", None, compile_=True, graphs=True, check=FAILED)
    m = measured_on(H200, gpu_utilization=58.0, facts=dict(FIT), tuning=tuned(EAGER, graphs))
    assert "cuda_graphs" in ids(advise(H200, None, m))
    assert "cuda_graphs" not in ids(advise(CPU, None, measured_on(CPU, step_time_s=0.001)))


def test_the_compile_rule_reads_compile_alone_not_the_cuda_graph_trial() -> None:
    """Both compiled, neither alone (the fused optimizer was kept first): the `compile`
    verdict took the fastest compiled trial, the CUDA-graph one, as compile's figure."""
    from accelkit.advisor.rules import compilation

    fused = candidate("eager+fused", "chosen", 0.022)
    fused["settings"]["optimizer"] = "fused"
    compiled = candidate("compile+fused", "slower", 0.030, compile_=True, check=PASSED)
    graphs = candidate(
        "cudagraphs+fused",
        "skipped",
        0.016,
        compile_=True,
        graphs=True,
        check=PASSED,
        why="the data ended after 6 of its steps",
    )
    for c in (compiled, graphs):
        c["settings"]["optimizer"] = "fused"
    record = tuned(EAGER, fused, compiled, graphs)
    m = measured_on(H200, gpu_utilization=58.0, step_time_s=0.022, facts=dict(FIT), tuning=record)
    said = compilation.torch_compile(Context.build(H200, None, m))
    assert said.evidence["tune.candidate"] == "compile+fused"
    assert "measured slower" in said.title
    graphs_said = cuda_graphs.cuda_graphs(Context.build(H200, None, m))
    assert graphs_said.speedup == pytest.approx(0.022 / 0.016)  # against the kept step
