"""`accelkit plan --gpu X --count N`: the what-if's links and the note that says them, for
NVLink-bridged cards (pairs) and for an NVLink board (every pair)."""

from __future__ import annotations

import json
import re

from accelkit.cli import main


def plan_json(capsys, gpu: str, count: int) -> dict:
    assert main(["plan", "--gpu", gpu, "--count", str(count), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_eight_a100_pcie_are_four_nvlink_pairs_in_the_json(capsys) -> None:
    document = plan_json(capsys, "A100 PCIe", 8)
    links = document["hardware"]["links"]
    assert len(links) == 28 and all(link["p2p"] for link in links)
    assert [(link["a"], link["b"]) for link in links if link["nvlink"]] == [
        (0, 1),
        (2, 3),
        (4, 5),
        (6, 7),
    ]
    assert any(
        n.startswith("what-if topology: NVLink within each group of 2") for n in document["notes"]
    )
    assert not [k for k in document["env"] if k.startswith("NCCL_")]


def test_eight_a100_sxm_are_one_nvlink_board_in_the_json(capsys) -> None:
    document = plan_json(capsys, "A100-SXM4-80GB", 8)
    assert all(link["nvlink"] and link["p2p"] for link in document["hardware"]["links"])
    assert any(
        n.startswith("what-if topology: NVLink between every pair") for n in document["notes"]
    )


def test_the_text_plan_prints_the_topology_note(capsys) -> None:
    assert main(["plan", "--gpu", "H200 NVL", "--count", "8"]) == 0
    text = re.sub(r"\s+", " ", capsys.readouterr().out)
    assert (
        "note: what-if topology: NVLink within each group of 4 (GPUs 0-3, 4-7), PCIe "
        "peer-to-peer between the groups" in text
    )
