"""The `compile` rule on plain data: an eager PyTorch run on a GPU, with the gain that
`tune` measured on the model, or an estimate that says how it was made."""

from __future__ import annotations

import pytest

from accelkit import what_if
from accelkit.advisor import Severity, advise
from accelkit.advisor.context import Context
from accelkit.advisor.rules import compilation
from accelkit.advisor.types import amdahl
from accelkit.hardware.info import HardwareInfo

from .helpers import ids, measured_on

H200 = what_if("H200")
CPU = HardwareInfo(source="cpu")
EAGER_FIT = {"compiled": False, "model_compiled": False}


def found(hardware=H200, **figures):
    return verdict(measured_on(hardware, **figures), hardware)


def verdict(measurements, hardware=H200):
    return compilation.torch_compile(Context.build(hardware, None, measurements))


def candidate(name, compile_, status, step, *, fused=False, why="", compile_seconds=None):
    optimizer = "fused" if fused else "default"
    return {
        "name": name,
        "settings": {"compile": compile_, "optimizer": optimizer},
        "status": status,
        "step_seconds": step,
        "spread": None if step is None else [step * 0.98, step * 1.02],
        "steps": 10,
        "compile_seconds": compile_seconds,
        "why": why,
    }


def tuned(chosen, *candidates):
    return {
        "decision": "tuned",
        "baseline": "eager",
        "chosen": chosen,
        "speedup": 1.0,
        "seconds": 60.0,
        "steps": 40,
        "candidates": list(candidates),
    }


# -- the issue's run: GPT-2 on an H200 at 12.6% MFU, 2.26x with compile=True ---------------

GPT2_LAYERS = [
    {
        "name": "transformer.wte",
        "type": "Embedding",
        "dims": {"num_embeddings": 50257, "embedding_dim": 768},
    },
    {"name": "lm_head", "type": "Linear", "dims": {"in_features": 768, "out_features": 50257}},
]


def gpt2_run(**extra):
    figures = {
        "matmul_dtype": "bf16",
        "mfu": 0.126,
        "input_wait_share": 0.001,
        "step_time_s": 0.112,
        "flops_per_step": 1.4e13,
        "gpu_utilization": 99.0,
        "peak_memory_bytes": int(30e9),
        "facts": {
            **EAGER_FIT,
            "layers": GPT2_LAYERS,
            "batch_size": 16,
            "parameters": 124_000_000,
            "model_state_bytes": int(2e9),
        },
    }
    figures.update(extra)
    return measured_on(H200, **figures)


def test_the_issues_run_puts_compile_first() -> None:
    """Before: only "vocabulary not a multiple of 8" and "memory headroom". Now the
    largest lever, torch.compile, leads, with an estimate that says what it rests on."""
    advice = advise(H200, None, gpt2_run())
    assert ids(advice)[0] == "compile"
    top = advice[0]
    rest = 1 - 0.126 - 0.001
    assert top.severity is Severity.WARNING
    assert top.speedup == pytest.approx(amdahl(rest, compilation.FUSION))
    assert top.speedup == pytest.approx(1.39, abs=0.01)
    assert top.expected_gain.startswith("estimate, about 1.39x")
    assert "MFU 12.6% against the datasheet peak" in top.expected_gain
    assert "docs/benchmarks.md" in top.expected_gain and "tune=True" in top.expected_gain
    assert "compile=True" in top.action and "tune=True" in top.action
    assert top.evidence["non_matmul_share"] == pytest.approx(rest, abs=1e-4)
    assert {"alignment", "memory_headroom"} <= set(ids(advice))


def test_a_tune_trial_that_measured_compile_gives_the_measured_gain() -> None:
    tuning = tuned(
        "eager",
        candidate("eager", False, "baseline", 0.112),
        candidate(
            "compile",
            True,
            "skipped",
            0.0495,
            compile_seconds=41.3,
            why="compile=False was set by the script",
        ),
    )
    top = advise(H200, None, gpt2_run(tuning=tuning))[0]
    assert top.id == "compile" and top.severity is Severity.WARNING
    assert top.speedup == pytest.approx(0.112 / 0.0495)
    assert top.expected_gain.startswith("measured 2.26x: 112.00 ms eager / 49.50 ms 'compile'")
    assert "compiling took 41 s once" in top.expected_gain
    assert "compile=False was set by the script" in top.title
    assert top.evidence["tune.step_ms"] == 49.5 and top.evidence["tune.compile_s"] == 41.3


def test_the_compile_only_candidate_is_preferred_to_one_that_also_fuses_the_optimizer() -> None:
    tuning = tuned(
        "eager+fused",
        candidate("eager", False, "baseline", 0.100),
        candidate("compile+fused", True, "slower", 0.060, fused=True),
        candidate("compile", True, "slower", 0.070),
    )
    result = verdict(gpt2_run(tuning=tuning))
    assert result.evidence["tune.candidate"] == "compile"
    assert result.speedup == pytest.approx(0.100 / 0.070)


def test_compile_measured_slower_makes_no_positive_claim() -> None:
    tuning = tuned(
        "eager",
        candidate("eager", False, "baseline", 0.030),
        candidate("compile", True, "slower", 0.036),
    )
    result = verdict(gpt2_run(tuning=tuning))
    assert result.severity is Severity.INFO and result.speedup is None
    assert "measured slower" in result.title and "36.00 ms against 30.00 ms" in result.title
    assert result.expected_gain.startswith("none: measured 0.83x")


def test_a_compile_trial_that_failed_says_why_without_a_claim() -> None:
    tuning = tuned(
        "eager",
        candidate("eager", False, "baseline", 0.030),
        candidate("compile", True, "failed", None, why="InternalTorchDynamoError: unsupported op"),
    )
    result = verdict(gpt2_run(tuning=tuning))
    assert result.speedup is None and "unsupported op" in result.title
    assert "torch._dynamo.explain" in result.action


def test_a_tuned_run_that_kept_compile_gets_no_compile_verdict() -> None:
    tuning = tuned(
        "compile",
        candidate("eager", False, "baseline", 0.112),
        candidate("compile", True, "chosen", 0.0495),
    )
    assert verdict(gpt2_run(tuning=tuning)) is None


def test_tune_records_with_the_optimizer_spelled_as_a_name_are_read_too() -> None:
    """accelkit.torch.tune writes ``{"compile": bool, "optimizer": "fused" | ...}``."""
    tuning = {
        "decision": "tuned",
        "baseline": "eager",
        "chosen": "eager+fused",
        "candidates": [
            {
                "name": "eager",
                "settings": {"compile": False, "optimizer": "default"},
                "status": "baseline",
                "step_seconds": 0.050,
            },
            {
                "name": "compile+fused",
                "settings": {"compile": True, "optimizer": "fused"},
                "status": "slower",
                "step_seconds": 0.041,
            },
            {
                "name": "compile",
                "settings": {"compile": True, "optimizer": "default"},
                "status": "slower",
                "step_seconds": 0.045,
            },
        ],
    }
    result = verdict(gpt2_run(tuning=tuning))
    assert result.evidence["tune.candidate"] == "compile"
    assert result.speedup == pytest.approx(0.050 / 0.045)


def test_without_a_flop_count_the_verdict_says_it_is_not_estimated() -> None:
    result = found(step_time_s=0.02, facts=EAGER_FIT)
    assert result.severity is Severity.INFO and result.speedup is None
    assert result.expected_gain.startswith("not estimated")


def test_the_measured_matmul_rate_stands_in_for_a_missing_datasheet_peak() -> None:
    result = found(mfu_calibrated=0.2, step_time_s=0.02, facts=EAGER_FIT)
    assert result.evidence["mfu_against"] == "the measured matmul rate"
    assert result.speedup == pytest.approx(amdahl(0.8, compilation.FUSION))


def test_a_hand_written_loop_is_told_to_compile_its_model() -> None:
    result = found(mfu=0.2, facts={"model_compiled": False})
    assert result.action.startswith("model = torch.compile(model)")
    assert result.evidence["model_compiled"] is False
    assert "meter.facts['compiled'] = True" in result.action


@pytest.mark.parametrize(
    "facts",
    [
        {"compiled": True, "model_compiled": False},  # fit(compile=True)
        {"compiled": False, "model_compiled": True},  # fit given a torch.compile'd model
        {"model_compiled": True},  # a Meter around a compiled model
        {},  # an older report: nothing says whether it compiled
    ],
)
def test_compiled_or_unknown_runs_get_no_compile_verdict(facts) -> None:
    assert found(mfu=0.1, facts=facts) is None


def test_compile_is_quiet_off_the_gpu_for_keras_and_for_what_if_gpus() -> None:
    assert found(CPU, mfu=None, facts=EAGER_FIT) is None
    assert found(framework="tensorflow", mfu=0.1, facts={"compiled": False}) is None
    measured_elsewhere = measured_on(what_if("A100-SXM4-80GB"), mfu=0.1, facts=EAGER_FIT)
    assert compilation.torch_compile(Context.build(H200, None, measured_elsewhere)) is None


def test_a_step_that_is_nearly_all_matmuls_gets_no_compile_verdict() -> None:
    assert found(mfu=0.95, facts=EAGER_FIT) is None
