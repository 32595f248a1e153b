"""What the installed frameworks were built for (`accelkit.hardware.framework_builds`), and
a machine whose GPUs NVML sees with a framework built without CUDA (issue 25): detected,
planned for the CPU, said in auto_configure's log, `accelkit doctor` and the fit's report.

This machine's PyTorch is the CPU build (``+cpu``), the most common installation mistake
on a GPU machine; the fake NVML (`fake_nvml`) shows the GPUs.
"""

from __future__ import annotations

import json
import logging
import sys
import textwrap

import pytest
from hypothesis import given
from hypothesis import strategies as st

import accelkit
from accelkit.configure import set_current_plan
from accelkit.hardware import FrameworkBuild, GpuInfo, HardwareInfo, detect, framework_builds
from accelkit.hardware.framework_builds import TORCH_CUDA_WHEELS, install_fix, usable_by

from .fake_nvml import h100_pair

pytestmark = pytest.mark.reliability

CPU_TORCH = FrameworkBuild("torch", "2.13.0+cpu", False, "CPU only")
CUDA_TORCH = FrameworkBuild("torch", "2.13.0+cu130", True, "CUDA 13.0")


def _torch_is_a_cpu_build() -> bool:
    build = framework_builds.read("torch")
    return build is not None and build.cuda is False


cpu_torch_only = pytest.mark.skipif(
    not _torch_is_a_cpu_build(), reason="needs the CPU build of PyTorch (a +cpu wheel)"
)


@pytest.fixture
def fake_h100_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML shows two H100 NVL (driver CUDA 13.0); no launcher variables."""
    monkeypatch.setitem(sys.modules, "pynvml", h100_pair())
    for name in ("CUDA_VISIBLE_DEVICES", "RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_NTASKS"):
        monkeypatch.delenv(name, raising=False)


# -- reading a build without importing it ----------------------------------------------


def test_torch_build_read_from_its_files_equals_the_imported_module(monkeypatch) -> None:
    torch = pytest.importorskip("torch")
    from_module = framework_builds.read("torch")
    monkeypatch.delitem(sys.modules, "torch.version")  # now read from torch/version.py
    from_file = framework_builds.read("torch")
    assert from_module == from_file
    assert from_file.version == torch.__version__
    assert from_file.cuda is (torch.version.cuda is not None)


def test_torch_version_file_spellings() -> None:
    text = textwrap.dedent(
        """
        from typing import Optional
        __version__ = '2.6.0+rocm6.2'
        cuda: Optional[str] = None
        hip: Optional[str] = '6.2.41133'
        """
    )
    values = framework_builds._constants(text)
    assert values == {"__version__": "2.6.0+rocm6.2", "cuda": None, "hip": "6.2.41133"}


@pytest.mark.parametrize(
    ("text", "cuda"),
    [
        (
            (
                "import collections\nbuild_info = collections.OrderedDict([('cuda_version', "
                "'12.5.1'), ('is_cuda_build', True)])"
            ),
            True,
        ),
        ("build_info = {'is_cuda_build': False, 'is_rocm_build': False}", False),
        ("build_info = make()", None),
        ("", None),
    ],
)
def test_tensorflow_build_info_spellings(text: str, cuda: bool | None) -> None:
    assert framework_builds._build_info(text).get("is_cuda_build") is cuda


def test_a_framework_not_installed_has_no_build(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # as if not installed
    assert framework_builds.read("tensorflow") is None
    with pytest.raises(ValueError, match="'torch', 'tensorflow'"):
        framework_builds.read("jax")


@given(st.integers(9, 14), st.integers(0, 9))
def test_the_fix_names_the_newest_wheel_the_driver_runs(major: int, minor: int) -> None:
    fix = install_fix("torch", f"{major}.{minor}")
    runnable = [w for w in TORCH_CUDA_WHEELS if w <= (major, minor)]
    if not runnable:
        assert "pytorch.org/get-started" in fix
        return
    newest = runnable[-1]
    assert fix.endswith(f"https://download.pytorch.org/whl/cu{newest[0]}{newest[1]}")
    assert fix.startswith("pip uninstall torch")


def test_unknown_driver_and_tensorflow_fixes() -> None:
    assert "pytorch.org/get-started" in install_fix("torch", None)
    assert "tensorflow[and-cuda]" in install_fix("tensorflow", "12.4")


# -- the machine as a framework sees it ------------------------------------------------


def _machine(*builds: FrameworkBuild) -> HardwareInfo:
    gpus = tuple(GpuInfo(i, "NVIDIA H100 80GB HBM3", compute_capability=(9, 0)) for i in (0, 1))
    return HardwareInfo(gpus=gpus, cuda_driver_version="12.8", source="nvml", frameworks=builds)


def test_a_build_without_cuda_sees_no_gpu() -> None:
    seen = usable_by(_machine(CPU_TORCH), "torch")
    assert seen.gpus == () and seen.links == ()
    assert "2 x NVIDIA H100 80GB HBM3 visible to the driver" in seen.gpus_unusable
    assert "torch 2.13.0+cpu was built without CUDA (CPU only)" in seen.gpus_unusable
    assert seen.gpus_unusable.endswith("https://download.pytorch.org/whl/cu128")
    assert seen.notes[-1] == seen.gpus_unusable
    for machine in (_machine(CUDA_TORCH), _machine(), _machine(FrameworkBuild("torch"))):
        assert usable_by(machine, "torch") is machine  # a CUDA build, or unknown: as is
    assert usable_by(_machine(CPU_TORCH), "tensorflow").gpus  # another framework's build


def test_the_builds_round_trip_through_json() -> None:
    seen = usable_by(_machine(CPU_TORCH), "torch")
    assert HardwareInfo.from_json(seen.to_json()) == seen


# -- on this machine's real PyTorch (a CPU build) with GPUs NVML shows -------------------


@cpu_torch_only
def test_detect_reads_the_builds_when_nvml_shows_gpus(fake_h100_pair) -> None:
    hardware = detect()
    assert len(hardware.gpus) == 2
    assert hardware.build_of("torch").cuda is False


@cpu_torch_only
def test_auto_configure_plans_the_cpu_and_warns(fake_h100_pair, caplog) -> None:
    """Before: bf16 on the two H100s, silently; the run then trained on the CPU in bf16."""
    with caplog.at_level(logging.WARNING, logger="accelkit"):
        plan = accelkit.auto_configure(framework="torch", dry_run=True, verbose=False)
    assert plan.precision.value == "fp32" and plan.device_type == "cpu"
    assert "built without CUDA" in plan.get("precision").reason
    assert "download.pytorch.org/whl/cu130" in plan.hardware.gpus_unusable  # driver CUDA 13.0
    assert not any("tf32" in s.key.value for s in plan.settings)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("torch 2.13" in m and "cannot use them" in m for m in warned), warned


@cpu_torch_only
def test_the_fit_report_says_it_trained_on_the_cpu(fake_h100_pair) -> None:
    torch = pytest.importorskip("torch")
    set_current_plan(None)
    model = torch.nn.Linear(8, 2)
    data = [(torch.randn(4, 8), torch.tensor([0, 1, 0, 1]))] * 6
    try:
        report = accelkit.torch.fit(
            model,
            data,
            torch.optim.SGD(model.parameters(), lr=0.1),
            torch.nn.CrossEntropyLoss(),
            progress=False,
            tune=False,
        )
    finally:
        set_current_plan(None)
    assert report.device == "cpu" and report.precision == "fp32"
    assert "built without CUDA" in report.notes["device"]


@cpu_torch_only
def test_doctor_says_it_before_the_plan(fake_h100_pair, capsys) -> None:
    from accelkit.cli import main

    assert main(["doctor", "--framework", "torch"]) == 0
    out = capsys.readouterr().out
    warning = out.index("WARNING: 2 x NVIDIA H100 NVL visible to the driver, but torch")
    assert warning < out.index("accelkit plan:")
    assert "precision  fp32" in out
    assert main(["doctor", "--framework", "torch", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert any("torch 2.13" in w for w in document["warnings"])
    assert document["plan"]["precision"] == "fp32"
