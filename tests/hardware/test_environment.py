"""Launcher variables, CUDA_VISIBLE_DEVICES and host facts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from accelkit.hardware.environment import (
    cpu_count,
    has_infiniband,
    host_memory_bytes,
    read_launcher,
)
from accelkit.hardware.info import GpuInfo, LauncherEnv
from accelkit.hardware.visible_devices import device_order_note, visible

GPUS = tuple(
    GpuInfo(index=i, name="NVIDIA H100 80GB HBM3", uuid=f"GPU-{i}{i}{i}-aaaa-bbbb-cccc")
    for i in range(4)
)
MIG_GPU = GpuInfo(
    index=0,
    name="NVIDIA A100-SXM4-40GB",
    uuid="GPU-a100",
    mig_enabled=True,
    mig_slices=("MIG 3g.20gb", "MIG 1g.5gb"),
    mig_uuids=("MIG-1111-aaaa", "MIG-2222-bbbb"),
)


def indices(value: str | None, gpus: tuple[GpuInfo, ...] = GPUS) -> list[int]:
    return [g.index for g in visible(gpus, value)]


# -- torchrun ------------------------------------------------------------------------


def test_torchrun_variables() -> None:
    env = read_launcher(
        {
            "RANK": "5",
            "LOCAL_RANK": "1",
            "WORLD_SIZE": "8",
            "LOCAL_WORLD_SIZE": "4",
            "MASTER_ADDR": "10.0.0.1",
        }
    )

    assert env == LauncherEnv(
        rank=5, local_rank=1, world_size=8, local_world_size=4, master_addr="10.0.0.1"
    )
    assert env.torchrun and env.nodes == 2 and not env.tf_config


def test_no_launcher() -> None:
    env = read_launcher({"PATH": "/usr/bin"})
    assert env == LauncherEnv() and not env.torchrun and env.nodes == 1


def test_non_integer_rank_is_noted_not_raised() -> None:
    notes: list[str] = []
    env = read_launcher({"RANK": "zero", "WORLD_SIZE": "2"}, notes)
    assert env.rank is None and env.world_size == 2
    assert notes == ["RANK='zero' is not an integer; ignored"]


# -- TF_CONFIG -----------------------------------------------------------------------


def test_tf_config_with_chief_and_workers() -> None:
    config = {
        "cluster": {"chief": ["host0:2222"], "worker": ["host1:2222", "host2:2222"], "ps": ["p:1"]},
        "task": {"type": "worker", "index": 1},
    }
    notes: list[str] = []

    env = read_launcher({"TF_CONFIG": json.dumps(config)}, notes)

    assert env.tf_config and env.tf_config_workers == 3
    assert env.tf_config_task == "worker:1"
    assert notes == []


def test_tf_config_without_task() -> None:
    env = read_launcher({"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1", "b:1"]}})})
    assert env.tf_config_workers == 2 and env.tf_config_task is None


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "[1, 2]",
        json.dumps({"cluster": {"worker": "host1:2222"}}),
        json.dumps({"cluster": ["host1:2222"]}),
    ],
)
def test_malformed_tf_config_is_a_note(text: str) -> None:
    notes: list[str] = []

    env = read_launcher({"TF_CONFIG": text}, notes)

    assert env.tf_config_workers is None and env.tf_config_task is None and not env.tf_config
    assert len(notes) == 1 and notes[0].startswith("TF_CONFIG is not valid")


def test_empty_tf_config_means_none() -> None:
    notes: list[str] = []
    assert not read_launcher({"TF_CONFIG": ""}, notes).tf_config
    assert notes == []


# -- CUDA_VISIBLE_DEVICES --------------------------------------------------------------


def test_unset_shows_every_gpu() -> None:
    assert indices(None) == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0", [0]),
        ("2,0", [2, 0]),
        (" 1 , 3 ", [1, 3]),
        ("", []),
        ("-1", []),
        ("1,-1,2", [1]),  # a negative index ends the list
        ("1,7,2", [1]),  # the first invalid entry ends the list
        ("gpu1,2", []),
        ("1gpu,2", [1, 2]),  # indices are read like strtoul
        ("0,0", []),  # a repeated device hides every device
    ],
)
def test_indices(value: str, expected: list[int]) -> None:
    assert indices(value) == expected


def test_uuids_and_unique_prefixes() -> None:
    assert indices("GPU-222-aaaa-bbbb-cccc,GPU-000") == [2, 0]
    assert indices("GPU-3") == [3]
    assert indices("GPU-,1") == []  # an ambiguous prefix is invalid


def test_mig_uuid_selects_one_slice() -> None:
    (gpu,) = visible((MIG_GPU,), "MIG-2222")
    assert gpu.index == 0 and gpu.mig_slices == ("MIG 1g.5gb",)
    assert gpu.mig_uuids == ("MIG-2222-bbbb",)


def test_notes_for_dropped_entries() -> None:
    notes: list[str] = []
    visible(GPUS, "1,9,2", notes)
    assert notes == [
        "CUDA_VISIBLE_DEVICES entry '9' names no GPU; CUDA ignores it and every entry after it"
    ]

    notes.clear()
    visible(GPUS, "", notes)
    assert notes == ["CUDA_VISIBLE_DEVICES='' hides all 4 GPUs"]

    notes.clear()
    visible(GPUS, "2,2", notes)
    assert "names a device twice" in notes[0]


def _cuda_indices(value: str, count: int) -> list[int]:
    """CUDA's reading of an index list: each entry's leading ASCII digits (C's strtoul),
    up to the first entry that names no GPU; a repeated GPU hides them all."""
    chosen: list[int] = []
    for entry in value.split(","):
        found = re.match(r"\+?0*([0-9]{1,9})(?![0-9])", entry.strip())
        index = int(found[1]) if found else count
        if index >= count:
            break
        if index in chosen:
            return []
        chosen.append(index)
    return chosen


# Entries of digits, Unicode digits str.isdigit accepts ("²", "٣") and separators
_ENTRIES = st.text(st.sampled_from("0123+- ,x\u00b2\u00b3\u0663\u0661\u0b67\uff11"), max_size=8)


@given(_ENTRIES)
@example("\u00b2").via("faults4 E13: raised ValueError")
@example("\u0663").via("faults4 E13: read as GPU 3")
@example("1," + "0" * 5000 + "2").via("past int()'s limit on digits")
def test_indices_are_read_as_cuda_reads_them_and_nothing_raises(value) -> None:
    """faults4 E13: only ASCII digits name a GPU, as CUDA's strtoul reads them."""
    notes: list[str] = []
    assert [g.index for g in visible(GPUS, value, notes)] == _cuda_indices(value, len(GPUS))


def test_launcher_reads_cuda_visible_devices() -> None:
    assert read_launcher({"CUDA_VISIBLE_DEVICES": "0,1"}).cuda_visible_devices == "0,1"
    assert read_launcher({}).cuda_visible_devices is None


# -- device order --------------------------------------------------------------------


def test_device_order_note_only_for_mixed_models() -> None:
    mixed = (GpuInfo(index=0, name="NVIDIA T4"), GpuInfo(index=1, name="NVIDIA A10"))

    assert device_order_note(GPUS, {}) is None
    assert "CUDA_DEVICE_ORDER" in (device_order_note(mixed, {}) or "")
    assert device_order_note(mixed, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}) is None
    assert device_order_note(mixed, {"CUDA_DEVICE_ORDER": "FASTEST_FIRST"}) is not None


# -- host ------------------------------------------------------------------------------


def test_host_facts() -> None:
    count = cpu_count()
    memory = host_memory_bytes()
    assert count is not None and count >= 1
    assert memory is not None and memory > 2**20


def test_infiniband(tmp_path: Path) -> None:
    assert has_infiniband(tmp_path / "missing") is False
    assert has_infiniband(tmp_path) is False
    (tmp_path / "mlx5_0").mkdir()
    assert has_infiniband(tmp_path) is True
