"""auto_configure end to end with a real PyTorch: switches, environment, failure paths."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import accelkit
from accelkit.hardware.info import GpuInfo, HardwareInfo
from accelkit.planning import Precision, Status

A100 = HardwareInfo(
    gpus=(GpuInfo(0, "NVIDIA A100-SXM4-80GB", compute_capability=(8, 0)),), source="snapshot"
)
SRC = os.path.join(os.path.dirname(__file__), "..", "src")


@pytest.fixture(autouse=True)
def clean_state(fresh_process: None) -> None:
    """Every test here starts from, and leaves, a fresh process state."""


def applied(plan: accelkit.Plan) -> list[str]:
    return [s.key for s in plan.settings if s.status is Status.APPLIED]


@pytest.mark.torch
def test_auto_configure_applies_and_prints_the_table(capsys) -> None:
    plan = accelkit.auto_configure(framework="torch", hardware=A100)
    assert plan.precision is Precision.BF16
    assert "torch.backends.cudnn.benchmark" in applied(plan)
    assert accelkit.current_plan() is plan
    table = capsys.readouterr().err
    assert "accelkit plan: torch, precision bf16" in table
    assert "torch.backends.cudnn.benchmark" in table and "applied" in table


@pytest.mark.torch
def test_dry_run_changes_nothing() -> None:
    plan = accelkit.auto_configure(framework="torch", hardware=A100, dry_run=True, verbose=False)
    assert applied(plan) == []
    assert {s.status for s in plan.settings} == {Status.PLANNED}
    assert "PYTORCH_CUDA_ALLOC_CONF" not in os.environ
    assert any("dry run" in note for note in plan.notes)


@pytest.mark.torch
def test_accelkit_disable_plans_but_applies_nothing(monkeypatch) -> None:
    monkeypatch.setenv("ACCELKIT_DISABLE", "1")
    plan = accelkit.auto_configure(framework="torch", hardware=A100, verbose=False)
    assert applied(plan) == [] and plan.precision is Precision.BF16
    assert "PYTORCH_CUDA_ALLOC_CONF" not in os.environ
    assert any("ACCELKIT_DISABLE=1" in note for note in plan.notes)


@pytest.mark.torch
def test_accelkit_precision_overrides_the_auto_choice(monkeypatch) -> None:
    monkeypatch.setenv("ACCELKIT_PRECISION", "fp32")
    plan = accelkit.auto_configure(framework="torch", hardware=A100, verbose=False)
    assert plan.precision is Precision.FP32
    assert plan.value("torch.backends.cuda.matmul.allow_tf32") is False
    assert any("ACCELKIT_PRECISION" in note for note in plan.notes)


@pytest.mark.torch
def test_explicit_precision_wins_over_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("ACCELKIT_PRECISION", "fp32")
    plan = accelkit.auto_configure(
        framework="torch", precision="tf32", hardware=A100, verbose=False
    )
    assert plan.precision is Precision.TF32


def test_bad_precision_names_the_valid_values() -> None:
    with pytest.raises(ValueError, match="'half'") as error:
        accelkit.auto_configure(precision="half", hardware=A100, verbose=False)
    assert "'half'" in str(error.value) and "'bf16'" in str(error.value)


def test_bad_accelkit_precision_names_the_variable(monkeypatch) -> None:
    monkeypatch.setenv("ACCELKIT_PRECISION", "int4")
    with pytest.raises(ValueError, match="ACCELKIT_PRECISION"):
        accelkit.auto_configure(hardware=A100, verbose=False)


def test_bad_framework_names_the_valid_values() -> None:
    with pytest.raises(ValueError, match="'tensorflow'"):
        accelkit.auto_configure(framework="jax", hardware=A100, verbose=False)


def test_missing_framework_gives_a_plan_and_an_install_hint(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # as if torch were not installed
    plan = accelkit.auto_configure(framework="torch", hardware=A100, verbose=False)
    assert applied(plan) == []
    assert any("pip install 'accelkit[torch]'" in note for note in plan.notes)
    with pytest.raises(ImportError, match=r"accelkit\[torch\]"):
        accelkit.apply(plan)


def test_other_ranks_stay_quiet(monkeypatch, capsys) -> None:
    monkeypatch.setenv("RANK", "1")
    accelkit.auto_configure(hardware=A100, dry_run=True)
    assert capsys.readouterr().err == ""


def _fresh_python(code: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run `code` in a new interpreter on this checkout's src (nothing imported yet)."""
    return subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC},
        timeout=timeout,
    )


def test_auto_configure_on_this_machine_never_raises() -> None:
    """Real detection on this machine (no GPU, no NVML here in CI), in a fresh process."""
    code = textwrap.dedent("""
        import accelkit
        plan = accelkit.auto_configure(verbose=False)
        print(plan.precision.value, plan.hardware.source, len(plan.settings))
    """)
    done = _fresh_python(code, timeout=120)
    assert done.returncode == 0, done.stderr
    precision, _source, count = done.stdout.split()
    assert precision in {p.value for p in Precision} and int(count) >= 1


def test_import_is_fast_and_imports_no_framework() -> None:
    # Fast by what it loads, which load on the machine cannot change: the standard
    # library and accelkit's own modules only (no framework, no NumPy, no NVML binding;
    # about 0.1 s on the CPU machine), never a wall-clock bound a busy machine can cross.
    code = textwrap.dedent("""
        import sys
        before = set(sys.modules)
        import accelkit
        added = {name.partition(".")[0] for name in set(sys.modules) - before}
        print(",".join(sorted(added - set(sys.stdlib_module_names) - {"accelkit"})) or "-")
    """)
    done = _fresh_python(code, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["-"]


def test_trainer_packages_load_on_first_use() -> None:
    pytest.importorskip("lightning")
    pytest.importorskip("transformers")
    code = textwrap.dedent("""
        import accelkit
        for package in (accelkit.lightning, accelkit.hf):
            print(package.AccelkitCallback.__module__)
    """)
    done = _fresh_python(code, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["accelkit.lightning.callback", "accelkit.hf.callback"]
