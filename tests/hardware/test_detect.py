"""`accelkit.hardware.detect` and the NVML reader, against a fake NVML.

The fake (`fake_nvml`) implements the pynvml functions the reader calls, so
machines we don't have can be described in a few lines.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from accelkit.hardware import HardwareInfo, Link, detect, nvml
from accelkit.hardware.capabilities import architecture_for
from accelkit.hardware.nvml import read_gpus

from .fake_nvml import GIB, FakeNvml, a100_mig, h100_pair, hgx_h100, rtx4090_box

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture
def use_nvml(monkeypatch: pytest.MonkeyPatch) -> Callable[[Any], None]:
    """Make `import pynvml` inside the reader return the given fake (None: not installed)."""

    def install(module: Any) -> None:
        monkeypatch.setitem(sys.modules, "pynvml", module)

    return install


# -- machines --------------------------------------------------------------------


def test_h100_pair_with_nvlink_bridges() -> None:
    fake = h100_pair()
    info = read_gpus(fake)

    assert info.source == "nvml" and info.notes == ()
    assert info.driver_version == "580.95.05" and info.cuda_driver_version == "13.0"
    first = info.gpus[0]
    assert first.name == "NVIDIA H100 NVL"
    assert first.compute_capability == (9, 0) and first.architecture == "hopper"
    assert first.memory_bytes == 94 * GIB
    assert first.ecc_enabled is True
    assert (first.pcie_generation, first.pcie_width) == (5, 16)
    assert first.power_limit_w == 400.0
    assert first.nvlink_links == 6
    assert first.mig_enabled is False and first.mig_slices == ()
    assert first.pci_bus_id == "00000000:18:00.0"
    assert first.memory_bandwidth_gbps == pytest.approx(4023, rel=0.01)
    assert info.links == (Link(a=0, b=1, p2p=True, nvlink=True, common_ancestor="nvlink"),)
    assert info.all_peers_reachable and info.all_nvlink
    assert fake.calls == ["init", "shutdown"]


def test_rtx4090_box_without_p2p_or_nvlink() -> None:
    info = read_gpus(rtx4090_box())

    assert info.notes == ()  # no ECC, NVLink or MIG on GeForce is normal, not worth a note
    assert [g.index for g in info.gpus] == [0, 1, 2, 3]
    assert all(g.architecture == "ada" and g.compute_capability == (8, 9) for g in info.gpus)
    assert all(g.ecc_enabled is False and g.nvlink_links == 0 for g in info.gpus)
    assert all(not g.mig_enabled for g in info.gpus)
    assert info.gpus[0].memory_bandwidth_gbps == pytest.approx(1008, rel=0.01)
    assert len(info.links) == 6
    assert all(link.p2p is False and link.nvlink is False for link in info.links)
    assert {(link.a, link.b): link.common_ancestor for link in info.links}[(0, 1)] == "node"
    assert {(link.a, link.b): link.common_ancestor for link in info.links}[(1, 2)] == "system"
    assert info.all_peers_reachable is False and not info.all_nvlink


def test_gpus_behind_nvswitches_are_all_connected() -> None:
    info = read_gpus(hgx_h100(4))

    assert all(g.nvlink_links == 18 for g in info.gpus)
    assert len(info.links) == 6 and info.all_nvlink
    assert {link.common_ancestor for link in info.links} == {"nvlink"}


def test_nvlink_to_an_unidentified_device_is_unknown_not_guessed() -> None:
    unreadable = {"nvmlDeviceGetNvLinkRemoteDeviceType": (FakeNvml.NVML_ERROR_NOT_SUPPORTED, None)}
    info = read_gpus(hgx_h100(2, fail=unreadable))

    assert info.gpus[0].nvlink_links == 18
    assert info.links[0].nvlink is None
    assert info.links[0].common_ancestor == "system"  # NVML's PCIe topology still reported


def test_mig_enabled_a100_lists_its_slices() -> None:
    info = read_gpus(a100_mig())

    (gpu,) = info.gpus
    assert gpu.architecture == "ampere" and gpu.mig_enabled
    assert gpu.mig_slices == (
        "NVIDIA A100-SXM4-40GB MIG 3g.20gb",
        "NVIDIA A100-SXM4-40GB MIG 2g.10gb",
        "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
    )
    assert gpu.mig_uuids[0] == "MIG-11111111-aaaa-bbbb-cccc-000000000001"
    assert info.mig_enabled and info.links == ()


def test_mig_capable_gpu_with_mig_off() -> None:
    (gpu,) = read_gpus(a100_mig(mig_enabled=False)).gpus
    assert not gpu.mig_enabled and gpu.mig_slices == ()


# -- NVML missing or failing -------------------------------------------------------


def test_pynvml_not_installed(use_nvml: Callable[[Any], None]) -> None:
    use_nvml(None)  # `import pynvml` raises ImportError

    info = read_gpus()

    assert info.source == "none" and info.gpus == ()
    assert info.notes == (
        "NVML not available: the nvidia-ml-py package is not installed (pip install nvidia-ml-py)",
    )


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (FakeNvml.NVML_ERROR_LIBRARY_NOT_FOUND, "libnvidia-ml.so.1 not found"),
        (FakeNvml.NVML_ERROR_DRIVER_NOT_LOADED, "the NVIDIA driver is not loaded"),
    ],
)
def test_nvml_init_failure_gives_cpu_only_snapshot(code: int, expected: str) -> None:
    fake = FakeNvml([], init_error=code)

    info = read_gpus(fake)

    assert info.source == "none" and info.gpus == ()
    assert len(info.notes) == 1 and info.notes[0].startswith(f"NVML not available: {expected}")
    assert fake.calls == ["init"]  # no shutdown without a successful init


def test_one_failing_call_leaves_one_field_empty() -> None:
    fake = rtx4090_box(fail={"nvmlDeviceGetMemoryBusWidth": (FakeNvml.NVML_ERROR_UNKNOWN, {1, 3})})

    info = read_gpus(fake)

    assert [g.memory_bus_width_bits for g in info.gpus] == [384, None, 384, None]
    assert info.gpus[1].memory_bandwidth_gbps is None
    assert info.gpus[1].name == "NVIDIA GeForce RTX 4090" and info.gpus[1].memory_bytes == 24 * GIB
    assert info.notes == ("NVML could not read the memory bus width (GPU 1, 3): Unknown Error",)
    assert len(info.links) == 6


def test_failing_pair_and_system_calls_are_noted() -> None:
    fake = h100_pair(
        fail={
            "nvmlDeviceGetP2PStatus": (FakeNvml.NVML_ERROR_NO_PERMISSION, None),
            "nvmlSystemGetCudaDriverVersion_v2": (FakeNvml.NVML_ERROR_UNKNOWN, None),
        }
    )

    info = read_gpus(fake)

    assert info.links[0].p2p is None and info.links[0].nvlink is True
    assert info.cuda_driver_version is None and info.driver_version == "580.95.05"
    assert any("P2P status (GPU 0-1)" in note for note in info.notes)
    assert "NVML could not read the CUDA driver version: Unknown Error" in info.notes


def test_lost_gpu_is_left_out_with_a_note() -> None:
    fake = rtx4090_box(fail={"nvmlDeviceGetHandleByIndex": (FakeNvml.NVML_ERROR_GPU_IS_LOST, None)})

    info = read_gpus(fake)

    assert info.gpus == () and info.source == "nvml"
    assert info.notes == ("NVML could not read the device handle (GPU 0, 1, 2, 3): GPU is lost",)


def test_unexpected_error_still_shuts_nvml_down(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = h100_pair()

    def explode(self: Any) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(nvml._NvmlReader, "read", explode)
    info = read_gpus(fake)

    assert info.gpus == () and info.notes == ("NVML reading failed: RuntimeError: boom",)
    assert fake.calls == ["init", "shutdown"]


def test_cuda_driver_version_formatting() -> None:
    assert read_gpus(h100_pair(cuda=12040)).cuda_driver_version == "12.4"


@pytest.mark.parametrize(
    ("capability", "architecture"),
    [
        ((6, 1), "pascal"),
        ((7, 0), "volta"),
        ((7, 2), "volta"),
        ((7, 5), "turing"),
        ((8, 0), "ampere"),
        ((8, 6), "ampere"),
        ((8, 7), "ampere"),
        ((8, 9), "ada"),
        ((9, 0), "hopper"),
        ((10, 0), "blackwell"),
        ((12, 0), "blackwell"),
        ((8, 8), None),
        (None, None),
    ],
)
def test_architecture_for(capability: tuple[int, int] | None, architecture: str | None) -> None:
    assert architecture_for(capability) == architecture


def test_architecture_falls_back_to_nvml_when_capability_unreadable() -> None:
    fake = h100_pair(
        fail={"nvmlDeviceGetCudaComputeCapability": (FakeNvml.NVML_ERROR_UNKNOWN, {0})}
    )
    gpus = read_gpus(fake).gpus
    assert gpus[0].compute_capability is None and gpus[0].architecture == "hopper"


# -- detect() ------------------------------------------------------------------------


def test_detect_on_h100_pair(use_nvml: Callable[[Any], None]) -> None:
    use_nvml(h100_pair())

    info = detect(environ={"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2"})

    assert info.source == "nvml" and info.gpu_count == 2 and info.all_nvlink
    assert info.launcher.torchrun and info.launcher.world_size == 2
    assert info.cpu_count is None or info.cpu_count >= 1
    assert info.notes == ()


def test_detect_applies_cuda_visible_devices(use_nvml: Callable[[Any], None]) -> None:
    use_nvml(rtx4090_box())

    info = detect(environ={"CUDA_VISIBLE_DEVICES": "3,1"})

    assert [g.index for g in info.gpus] == [3, 1]
    assert [(link.a, link.b) for link in info.links] == [(1, 3)]
    assert info.launcher.cuda_visible_devices == "3,1"


def test_detect_with_uuid_prefix_and_empty_list(use_nvml: Callable[[Any], None]) -> None:
    use_nvml(rtx4090_box())

    assert [g.index for g in detect(environ={"CUDA_VISIBLE_DEVICES": "GPU-24090"}).gpus] == [2]
    hidden = detect(environ={"CUDA_VISIBLE_DEVICES": ""})
    assert hidden.gpus == () and hidden.links == () and hidden.source == "nvml"
    assert "hides all 4 GPUs" in " ".join(hidden.notes)


def test_detect_mig_slice_selected_by_uuid(use_nvml: Callable[[Any], None]) -> None:
    use_nvml(a100_mig())

    info = detect(environ={"CUDA_VISIBLE_DEVICES": "MIG-22222222"})

    (gpu,) = info.gpus
    assert gpu.mig_slices == ("NVIDIA A100-SXM4-40GB MIG 2g.10gb",)


def test_detect_notes_device_order_on_mixed_machines(use_nvml: Callable[[Any], None]) -> None:
    gpus = h100_pair().gpus[:1] + rtx4090_box().gpus[1:2]
    use_nvml(FakeNvml(gpus))

    assert any("CUDA_DEVICE_ORDER" in note for note in detect(environ={}).notes)
    assert detect(environ={"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}).notes == ()


def test_detect_never_raises(
    use_nvml: Callable[[Any], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    use_nvml(h100_pair())

    def broken() -> int:
        raise RuntimeError("no /proc here")

    monkeypatch.setattr("accelkit.hardware.environment.cpu_count", broken)
    info = detect(environ={})

    assert info.source == "none"
    assert info.notes == ("hardware detection failed unexpectedly: RuntimeError: no /proc here",)


@pytest.mark.parametrize("machine", [h100_pair, rtx4090_box, a100_mig, hgx_h100])
def test_detected_snapshot_round_trips_through_json(
    use_nvml: Callable[[Any], None], machine: Callable[[], FakeNvml]
) -> None:
    use_nvml(machine())
    info = detect(environ={"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1", "b:1"]}})})

    assert HardwareInfo.from_json(info.to_json()) == info


# -- this machine ------------------------------------------------------------------


def test_real_detect_without_gpu_is_cpu_only_and_imports_no_framework() -> None:
    """On a machine without libnvidia-ml, detect() says why and loads no framework."""
    script = textwrap.dedent(
        """
        import json, sys
        import accelkit
        detect = getattr(accelkit, "detect", None)
        if detect is None:  # the package root may not re-export it yet
            from accelkit.hardware import detect
        info = detect()
        print(json.dumps({
            "info": info.to_dict(),
            "frameworks": sorted(m for m in ("torch", "tensorflow") if m in sys.modules),
        }))
        """
    )
    # this process's environment (PYTHONDONTWRITEBYTECODE and the rest), with accelkit
    # imported from this checkout and nothing else from the parent's PYTHONPATH
    environ = {**os.environ, "PYTHONPATH": str(SRC)}
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
        check=True,
    )
    output = json.loads(result.stdout)
    info = HardwareInfo.from_dict(output["info"])

    assert output["frameworks"] == []
    if info.source == "nvml":
        pytest.skip("this machine has NVML; the CPU-only path is covered by the fakes")
    assert info.gpus == () and info.links == ()
    assert any(note.startswith("NVML not available:") for note in info.notes)
    assert info.cpu_count and info.cpu_count >= 1
