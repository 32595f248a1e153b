"""The `float8` rule: a bf16 PyTorch run on float8 tensor cores (8.9+) whose matmuls
stayed in bf16: tune's measured figure where it tried float8, the reason where it
skipped it and the user can change that, how to let tune try it where it did not run.
Never on an A100, a T4 or the CPU, never for TensorFlow; plain data throughout."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelkit import plan_for, what_if
from accelkit.advisor import Severity, advise
from accelkit.advisor.context import Context
from accelkit.advisor.rules.alignment import alignment
from accelkit.advisor.rules.float8 import convertible, float8
from accelkit.hardware.info import GpuInfo, HardwareInfo

from .helpers import ids, measured_on

H200, RTX4090 = what_if("H200"), what_if("RTX 4090")
A100, T4 = what_if("A100-SXM4-80GB"), what_if("Tesla T4")
CPU = HardwareInfo(source="cpu")
LAYERS = [
    {"name": "up", "type": "Linear", "dims": {"in_features": 2048, "out_features": 8192}},
    {"name": "head", "type": "Linear", "dims": {"in_features": 2048, "out_features": 32000}},
]


def candidate(name: str, status: str, step: float | None, **extra: Any) -> dict[str, Any]:
    settings = {"compile": True, "optimizer": "default", **extra.pop("settings", {})}
    return {"name": name, "settings": settings, "status": status, "step_seconds": step,
            "steps": 10, **extra}  # fmt: skip


EAGER = {**candidate("eager", "baseline", 0.050), "settings": {"compile": False}}
COMPILE = candidate("compile", "chosen", 0.030, paired_speedup=1.6, against="eager")
FLOAT8 = {"float8": True}


def tuned(*candidates: dict[str, Any], decision: str = "tuned", **extra: Any) -> dict[str, Any]:
    return {"decision": decision, "seconds": 9.0, "steps": 40,
            "candidates": [EAGER, COMPILE, *candidates], **extra}  # fmt: skip


def verdict(tuning: Any = None, hardware: HardwareInfo = H200, plan: Any = None, **m: Any):
    m.setdefault("precision", "bf16")
    figures = measured_on(hardware, **m)
    if tuning is not None:
        figures["tuning"] = tuning
    return float8(Context.build(hardware, plan, figures))


# -- tune did not run ---------------------------------------------------------------------


@pytest.mark.parametrize("hardware", [H200, RTX4090])
def test_not_tuned_says_how_to_let_tune_try_float8_without_a_gain(hardware) -> None:
    found = verdict(hardware=hardware)
    assert found is not None and found.id == "float8" and found.severity is Severity.INFO
    assert "has float8 tensor cores (compute capability" in found.title
    assert "tune did not run" in found.title and found.evidence["tune"] == "not run"
    assert "accelkit.torch.fit(..., tune=True)" in found.action
    assert "AccelkitCallback(tune=True)" in found.action
    assert "pip install 'accelkit[fp8]'" in found.action
    assert found.speedup is None and found.expected_gain.startswith("not measured")


def test_the_plan_of_the_run_gives_its_precision() -> None:
    assert verdict(plan=plan_for("H200"), precision=None) is not None
    assert verdict(plan=plan_for("H200", precision="fp16"), precision=None) is None


def test_a_model_without_a_linear_layer_float8_could_take_gets_nothing() -> None:
    found = verdict(facts={"layers": LAYERS})
    assert found is not None and found.evidence["linear_layers"] == 1
    odd = [{"name": "fc", "type": "Linear", "dims": {"in_features": 1000, "out_features": 10}}]
    assert verdict(facts={"layers": [*odd, LAYERS[1]]}) is None  # not multiples of 16
    assert verdict(facts={"layers": LAYERS[1:]}) is None  # the head alone stays in bf16
    conv = [{"name": "c", "type": "Conv2d", "dims": {"in_channels": 64, "out_channels": 64}}]
    assert verdict(facts={"layers": conv}) is None


def test_convertible_leaves_the_head_and_odd_dimensions_out() -> None:
    assert [layer["name"] for layer in convertible(LAYERS)] == ["up"]
    assert convertible([]) == [] and convertible(["not a layer"]) == []


def test_a_decision_not_to_tune_and_a_record_without_float8_are_said() -> None:
    found = verdict(tuned(decision="not tuned: tune='auto' tunes GPU runs"))
    assert "tune did not try float8 (not tuned: tune='auto'" in found.title
    assert found.evidence["tune.decision"].startswith("not tuned")
    found = verdict(tuned())
    assert "no float8 trial" in found.title


def test_a_float8_candidate_not_timed_is_said() -> None:
    queued = candidate("compile+float8", "skipped", None, settings=FLOAT8,
                       why="the data ended before its steps")  # fmt: skip
    found = verdict(tuned(queued))
    assert "tune did not time float8 (the data ended before its steps)" in found.title
    assert found.speedup is None


def test_quiet_under_ddp_where_tune_does_not_try_float8() -> None:
    assert verdict(facts={"distributed": True}) is None
    assert verdict(world_size=2) is None


# -- tune tried float8 ----------------------------------------------------------------------


def test_slower_names_tunes_paired_figure_status_and_why() -> None:
    slower = candidate("compile+float8", "slower", 0.031, settings=FLOAT8,
                       paired_speedup=0.96, paired_spread=[0.94, 0.98], against="compile",
                       why="not clearly faster: 0.96x")  # fmt: skip
    found = verdict(tuned(slower))
    assert found is not None and found.severity is Severity.INFO and found.speedup is None
    assert "tune tried float8 matmuls in its 'compile+float8' trial" in found.title
    assert "0.96x the speed of 'compile'" in found.title and "0.94-0.98x" in found.title
    assert "slower: not clearly faster" in found.title and "kept bf16" in found.title
    assert found.evidence["tune.paired_speedup"] == 0.96
    assert found.evidence["tune.against"] == "compile"
    assert found.evidence["tune.status"] == "slower"
    assert found.expected_gain.startswith("none on this model")


def test_faster_but_not_kept_is_the_only_measured_gain() -> None:
    cut = candidate("compile+float8", "skipped", 0.026, settings=FLOAT8, paired_speedup=1.15,
                    paired_spread=[1.12, 1.18], against="compile",
                    why="its paired rounds ended with the data")  # fmt: skip
    found = verdict(tuned(cut))
    assert found.severity is Severity.WARNING and found.speedup == 1.15
    assert "float8 matmuls ran 1.15x the speed of 'compile'" in found.title
    assert "did not keep them" in found.title
    assert "measured 1.15x against 'compile'" in found.expected_gain
    assert "steps=N" in found.action


def test_dropped_by_its_check_says_the_figures() -> None:
    check = {"loss_difference": 0.05, "loss_limit": 0.02, "failed": "loss"}
    dropped = candidate("compile+float8", "failed", None, settings=FLOAT8, check=check,
                        why="loss differs")  # fmt: skip
    found = verdict(tuned(dropped))
    assert "dropped in tune's 'compile+float8' trial" in found.title
    assert "its loss check against the bf16 step: loss 5% > 2%" in found.title
    assert found.evidence["tune.check.failed"] == "loss"
    assert found.expected_gain.startswith("not measured")


def test_a_failed_start_recorded_under_the_levers_name_is_said() -> None:
    failed = {"name": "float8", "settings": {}, "status": "failed",
              "why": "RuntimeError: _scaled_mm needs dimensions multiples of 16"}  # fmt: skip
    found = verdict(tuned(failed))
    assert "dropped in tune's 'float8' trial: RuntimeError" in found.title


@pytest.mark.parametrize(
    "record",
    [
        tuned(candidate("compile+float8", "chosen", 0.026, settings=FLOAT8)),
        tuned(float8=True),
    ],
)
def test_quiet_where_tune_kept_float8(record: dict[str, Any]) -> None:
    assert verdict(record) is None


def test_quiet_under_precision_fp8() -> None:
    plan = plan_for("H200", precision="fp8")
    assert verdict(plan=plan, precision=None) is None


# -- tune skipped float8 --------------------------------------------------------------------


def skipped(why: str) -> dict[str, Any]:
    return {"name": "float8", "settings": {}, "status": "skipped", "why": why}


def test_skipped_for_want_of_torchao_gives_the_install_command() -> None:
    found = verdict(tuned(skipped('torchao is not installed: pip install "accelkit[fp8]"')))
    assert "tune did not try float8 matmuls on NVIDIA H200" in found.title
    assert "torchao is not installed" in found.title
    assert found.action.startswith("pip install 'accelkit[fp8]'")
    assert found.evidence["tune.status"] == "skipped"


def test_skipped_for_want_of_the_runs_length_asks_for_it() -> None:
    found = verdict(tuned(skipped("the run's length is unknown (no steps= and no len(loader))")))
    assert "steps=N" in found.action and found.speedup is None


@pytest.mark.parametrize(
    "why",
    [
        "no linear layer large enough for float8 (12 smaller than 4096 in x 1024 out features)",
        "not tried under DDP yet (not measured on several GPUs)",
        "the kept step is not compiled: float8's casts run as separate kernels",
        "the run's 40 s left would not pay back float8's compilation (about 72 s)",
    ],
)
def test_skipped_for_a_reason_about_the_model_or_run_is_left_to_the_record(why: str) -> None:
    assert verdict(tuned(skipped(why))) is None


# -- never here -------------------------------------------------------------------------------


@pytest.mark.parametrize("hardware", [A100, T4, CPU])
def test_never_below_8_9_or_on_the_cpu(hardware: HardwareInfo) -> None:
    slower = candidate("compile+float8", "slower", 0.031, settings=FLOAT8, paired_speedup=0.9,
                       against="compile")  # fmt: skip
    for record in (None, tuned(slower), tuned(skipped("torchao is not installed: pip"))):
        assert verdict(record, hardware=hardware) is None
    assert "float8" not in ids(advise(hardware, None, measured_on(hardware, precision="bf16")))


def test_never_for_tensorflow() -> None:
    assert verdict(framework="tensorflow") is None
    assert verdict(plan=plan_for("H200", framework="tensorflow"), precision=None) is None


def test_never_for_a_run_measured_on_another_gpu() -> None:
    figures = measured_on(A100, precision="bf16")
    assert float8(Context.build(H200, None, figures)) is None


def test_registered_and_given_by_advise() -> None:
    found = advise(H200, plan_for("H200"), measured_on(H200, precision="bf16"))
    assert "float8" in ids(found)


def _float8_trial(status: str) -> dict[str, Any]:
    return tuned(candidate("compile+float8", status, 0.03, settings=FLOAT8,
                           paired_speedup=1.05, against="compile"))  # fmt: skip


RECORDS = st.one_of(
    st.none(),
    st.sampled_from(["slower", "skipped", "failed", "chosen"]).map(_float8_trial),
    st.just(tuned(skipped("torchao is not installed: pip install"))),
)


@given(
    cc=st.tuples(st.integers(3, 12), st.integers(0, 9)),
    precision=st.sampled_from(["bf16", "fp16", "fp32", "tf32", "fp8"]),
    framework=st.sampled_from(["torch", "tensorflow"]),
    record=RECORDS,
)
def test_fires_only_on_8_9_pytorch_bf16_and_claims_only_measured_gains(
    cc: tuple[int, int], precision: str, framework: str, record: Any
) -> None:
    hardware = HardwareInfo(gpus=(GpuInfo(0, "Some GPU", compute_capability=cc),), source="x")
    found = verdict(record, hardware=hardware, precision=precision, framework=framework)
    if found is None:
        return
    assert cc >= (8, 9) and precision == "bf16" and framework == "torch"
    if found.speedup is not None:
        assert found.speedup > 1.0 and found.expected_gain.startswith("measured")


# -- alignment under float8 ------------------------------------------------------------------


def test_alignment_asks_for_multiples_of_16_where_float8_runs() -> None:
    layers = [{"name": "fc", "type": "Linear", "dims": {"in_features": 4096, "out_features": 4104}}]
    bf16 = alignment(
        Context.build(H200, plan_for("H200"), measured_on(H200, facts={"layers": layers}))
    )
    assert bf16 is None  # 4104 is a multiple of 8
    for plan, tuning in (
        (plan_for("H200", precision="fp8"), None),
        (plan_for("H200"), tuned(float8=True)),
    ):
        figures = measured_on(H200, facts={"layers": layers}, tuning=tuning)
        found = alignment(Context.build(H200, plan, figures))
        assert found is not None and found.evidence["multiple"] == 16
        assert found.evidence["matmul_dtype"] == "fp8"
