"""A what-if's links follow the datasheet row's NVLink domain (`nvlink_gpus`): NVLink
within a bridge of 2 or 4 or a board of 8 or 16, PCIe peer-to-peer beyond it where the
model allows it (never GeForce). Before, every pair of a row with any NVLink figure was
NVLink: 8 x A100 PCIe came out as one NVLink fabric, not four bridged pairs."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelkit import specs
from accelkit.hardware.info import MAX_GPUS_PER_NODE, HardwareInfo
from accelkit.hardware.what_if import server_gpus, what_if


def nvlink_pairs(hardware: HardwareInfo) -> set[tuple[int, int]]:
    return {(link.a, link.b) for link in hardware.links if link.nvlink}


def pairs_without_p2p(hardware: HardwareInfo) -> set[tuple[int, int]]:
    return {(link.a, link.b) for link in hardware.links if not link.p2p}


def groups(*members: range) -> set[tuple[int, int]]:
    """Every pair within each group."""
    return {pair for group in members for pair in itertools.combinations(group, 2)}


EVERY_PAIR_OF_8 = groups(range(8))
PAIRS_OF_8 = groups(range(2), range(2, 4), range(4, 6), range(6, 8))

SNAPSHOTS = [
    # (GPU, count, NVLink pairs, pairs without peer-to-peer, in the topology note)
    pytest.param(
        "A100 PCIe",
        8,
        PAIRS_OF_8,
        set(),
        "NVLink within each group of 2 (GPUs 0-1, 2-3, 4-5, 6-7), PCIe peer-to-peer "
        "between the groups",
        id="a100-pcie-x8-bridged-pairs",
    ),
    pytest.param(
        "A100-SXM4-80GB",
        8,
        EVERY_PAIR_OF_8,
        set(),
        "NVLink between every pair, one NVLink domain of up to 16",
        id="a100-sxm-x8-hgx",
    ),
    pytest.param(
        "H100 PCIe",
        8,
        PAIRS_OF_8,
        set(),
        "NVLink within each group of 2",
        id="h100-pcie-x8-bridged-pairs",
    ),
    pytest.param(
        "H200 NVL",
        8,
        groups(range(4), range(4, 8)),
        set(),
        "NVLink within each group of 4 (GPUs 0-3, 4-7), PCIe peer-to-peer between the groups",
        id="h200-nvl-x8-4-way-bridges",
    ),
    pytest.param(
        "A100 PCIe",
        5,
        groups(range(2), range(2, 4)),
        set(),
        "NVLink within each group of 2 (GPUs 0-1, 2-3, 4)",
        id="a100-pcie-x5-one-unbridged",
    ),
    pytest.param(
        "RTX 3090",
        4,
        groups(range(2), range(2, 4)),
        {(0, 2), (0, 3), (1, 2), (1, 3)},
        "NVLink within each group of 2 (GPUs 0-1, 2-3), no peer-to-peer between the groups: "
        "NVIDIA does not enable PCIe peer-to-peer on GeForce cards",
        id="rtx-3090-x4-two-bridges-no-pcie-p2p",
    ),
    pytest.param("RTX 3090", 2, {(0, 1)}, set(), "NVLink between every pair", id="rtx-3090-x2"),
    pytest.param(
        "L40S",
        4,
        set(),
        set(),
        "no NVLink, PCIe peer-to-peer between the GPUs",
        id="l40s-x4-pcie",
    ),
    pytest.param(
        "RTX 4090",
        2,
        set(),
        {(0, 1)},
        "no NVLink, no peer-to-peer between the GPUs",
        id="rtx-4090-x2-geforce",
    ),
    pytest.param(
        "GH200",
        4,
        groups(range(4)),
        set(),
        "NVLink between every pair, assumed: the datasheet row does not say how many GPUs "
        "one NVLink domain joins",
        id="gh200-x4-domain-assumed",
    ),
]


@pytest.mark.parametrize(("gpu", "count", "nvlink", "no_p2p", "note"), SNAPSHOTS)
def test_links_follow_the_rows_nvlink_domain(gpu, count, nvlink, no_p2p, note) -> None:
    hardware = what_if(gpu, count)
    assert len(hardware.links) == count * (count - 1) // 2
    assert nvlink_pairs(hardware) == nvlink
    assert pairs_without_p2p(hardware) == no_p2p
    assert hardware.all_nvlink is (nvlink == groups(range(count)))
    topology = [n for n in hardware.notes if n.startswith("what-if topology: ")]
    assert len(topology) == 1 and note in topology[0], hardware.notes


def test_eight_a100_pcie_are_four_bridged_pairs_and_eight_sxm_one_board() -> None:
    pcie, sxm = what_if("A100 PCIe", 8), what_if("A100-SXM4-80GB", 8)
    assert not pcie.all_nvlink and pcie.all_peers_reachable is True
    assert sxm.all_nvlink and sxm.all_peers_reachable is True
    between_bridges = next(link for link in pcie.links if (link.a, link.b) == (1, 2))
    assert (between_bridges.nvlink, between_bridges.p2p) == (False, True)


def test_one_gpu_has_no_links_and_no_topology_note() -> None:
    hardware = what_if("A100 PCIe", 1)
    assert hardware.links == ()
    assert not any(n.startswith("what-if topology") for n in hardware.notes)


def test_only_geforce_rows_lack_pcie_peer_to_peer() -> None:
    """The table's convention: p2p on every datacenter and workstation card; on GeForce
    only the NVLink bridge's (RTX 2080, 3090), never over PCIe."""
    rows = specs.all_specs()
    assert {s.key for s in rows if not s.pcie_p2p} == {
        s.key for s in rows if s.segment == "geforce"
    }
    assert specs.by_key("rtx-3090").p2p and not specs.by_key("rtx-3090").pcie_p2p


def domain_of(spec: specs.GpuSpec) -> int:
    """GPUs one NVLink domain joins in a what-if (a whole server where the row gives no count)."""
    if not spec.nvlink_gbps:
        return 1
    return spec.nvlink_gpus or MAX_GPUS_PER_NODE


ANY_ROW = st.sampled_from(specs.all_specs())


@settings(max_examples=150, deadline=None)
@given(spec=ANY_ROW, count=st.integers(1, 2 * MAX_GPUS_PER_NODE + 3))
def test_any_row_and_count_nvlink_only_within_domains(spec, count) -> None:
    hardware = what_if(spec.key, count)
    domain = domain_of(spec)
    server = {i: i // server_gpus(spec) for i in range(count)}  # an HGX board's 8, else 16
    # one link per unordered pair of a server, named once (a < b): symmetric by construction
    pairs = [(link.a, link.b) for link in hardware.links]
    assert len(pairs) == len(set(pairs)) and all(a < b for a, b in pairs)
    assert set(pairs) == {
        (a, b) for a, b in itertools.combinations(range(count), 2) if server[a] == server[b]
    }
    for link in hardware.links:
        same_domain = link.a // domain == link.b // domain
        assert link.nvlink is (bool(spec.nvlink_gbps) and same_domain), (link, domain)
        assert link.p2p is (spec.p2p if link.nvlink else spec.pcie_p2p), link
    # NVLink peers are an equivalence: symmetric and transitive, cliques of one domain
    peers = {i: {i} for i in range(count)}
    for a, b in nvlink_pairs(hardware):
        peers[a].add(b)
        peers[b].add(a)
    for i, group in peers.items():
        assert all(peers[j] == group for j in group), (i, group)
        assert len(group) <= domain


@settings(max_examples=100, deadline=None)
@given(spec=ANY_ROW, data=st.data())
def test_any_row_with_nvlink_up_to_its_domain_is_all_nvlink(spec, data) -> None:
    domain = min(domain_of(spec), MAX_GPUS_PER_NODE)
    if domain < 2:
        assert not nvlink_pairs(what_if(spec.key, data.draw(st.integers(2, 8))))
        return
    hardware = what_if(spec.key, data.draw(st.integers(2, domain)))
    assert hardware.all_nvlink and hardware.all_peers_reachable is True


@settings(max_examples=60, deadline=None)
@given(spec=ANY_ROW, count=st.integers(2, 3 * MAX_GPUS_PER_NODE))
def test_the_note_says_the_domain_is_assumed_exactly_where_the_row_has_no_count(
    spec, count
) -> None:
    hardware = what_if(spec.key, count)
    assumed = any("assumed" in n for n in hardware.notes)
    assert assumed is bool(spec.nvlink_gbps and not spec.nvlink_gpus)


@pytest.mark.parametrize(
    ("count", "servers", "across", "words"),
    [
        (4, 1, False, "one NVLink domain of up to 72"),
        (8, 2, True, "across servers: one NVLink domain joins up to 72 (18 servers of 4)"),
        (144, 36, False, "the domains meet over the network"),
    ],
)
def test_gb200_servers_are_trays_of_four_in_one_nvlink_domain(count, servers, across, words):
    hardware = what_if("GB200", count)
    assert (hardware.servers, hardware.gpus_per_server) == (servers, min(count, 4))
    assert hardware.nvlink_domain == 72 and hardware.nvlink_across_servers is across
    assert any(words in note for note in hardware.notes)
    assert HardwareInfo.from_dict(hardware.to_dict()).nvlink_across_servers is across
