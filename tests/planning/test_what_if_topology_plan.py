"""What the planner makes of a what-if's topology (`what_if` links within NVLink domains):
8 x A100 PCIe are four bridged pairs that reach each other over PCIe, 8 x A100 SXM one
HGX board; GeForce cards on NVLink bridges reach the other pairs through host memory.
The NCCL variables and the strategies follow, and their reasons say where the topology
comes from (the datasheet for a what-if, NVML for a detected machine)."""

from __future__ import annotations

from accelkit import plan_for, what_if
from accelkit.hardware.info import GpuInfo, HardwareInfo, Link
from accelkit.planning.distribution import nccl_settings


def topology_note(notes: tuple[str, ...] | list[str]) -> str:
    (note,) = [n for n in notes if n.startswith("what-if topology: ")]
    return note


def test_eight_a100_pcie_and_eight_a100_sxm_plan_the_same_nccl_on_the_links_they_have() -> None:
    pcie, sxm = plan_for("A100 PCIe", 8), plan_for("A100-SXM4-80GB", 8)
    for plan in (pcie, sxm):
        assert plan.distribution.value == "ddp"
        assert not [k for k in plan.env if k.startswith("NCCL_")]  # every pair is P2P
        assert plan.value("launch") == "torchrun --nproc-per-node 8 your_script.py"
    assert topology_note(pcie.notes) == (
        "what-if topology: NVLink within each group of 2 (GPUs 0-1, 2-3, 4-5, 6-7), PCIe "
        "peer-to-peer between the groups (the datasheet's interconnect: NVLink bridge for "
        "2 GPUs, PCIe Gen4: 64 GB/s)"
    )
    assert topology_note(sxm.notes).startswith(
        "what-if topology: NVLink between every pair, one NVLink domain of up to 16 ("
    )
    assert not pcie.hardware.all_nvlink and sxm.hardware.all_nvlink


def test_tensorflow_mirrors_over_nccl_on_bridged_pairs_and_on_a_board() -> None:
    for gpu in ("A100 PCIe", "A100-SXM4-80GB", "H200 NVL"):
        plan = plan_for(gpu, 8, framework="tensorflow")
        setting = plan.get("tf.distribute.Strategy")
        assert setting.value == "NcclAllReduce", gpu
        assert "the GPUs reach each other peer-to-peer" in setting.reason


def test_four_bridged_geforce_cards_disable_p2p_and_say_the_bridges_go_unused() -> None:
    plan = plan_for("RTX 3090", 4)
    setting = plan.get("NCCL_P2P_DISABLE")
    assert setting.value == "1"
    assert setting.reason == (
        "no peer-to-peer access between GPUs 0-2, 0-3, 1-2, 1-3 (the datasheet): NCCL goes "
        "through host memory instead of trying P2P, which hangs on e.g. GeForce RTX "
        "40-series; the NVLink between GPUs 0-1, 2-3 goes unused too (NCCL_P2P_DISABLE "
        "turns off every P2P path)"
    )
    assert plan.value("launch") == "NCCL_P2P_DISABLE=1 torchrun --nproc-per-node 4 your_script.py"
    tensorflow = plan_for("RTX 3090", 4, framework="tensorflow")
    assert tensorflow.value("tf.distribute.Strategy") == "HierarchicalCopyAllReduce"


def test_two_bridged_geforce_cards_need_nothing() -> None:
    assert nccl_settings(what_if("RTX 3090", 2)) == []


def test_a_detected_machine_names_nvml_as_the_source() -> None:
    hardware = HardwareInfo(
        gpus=(GpuInfo(0, "NVIDIA GeForce RTX 4090"), GpuInfo(1, "NVIDIA GeForce RTX 4090")),
        links=(Link(0, 1, p2p=False, nvlink=False, common_ancestor="hostbridge"),),
        source="nvml",
    )
    (setting,) = nccl_settings(hardware)
    assert "between GPUs 0-1 (NVML): " in setting.reason
    assert "unused" not in setting.reason
