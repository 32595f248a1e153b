"""What-if counts are bounded by what exists, and the topology grows linearly."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelkit import specs
from accelkit.hardware.info import MAX_GPUS_PER_NODE, HardwareInfo
from accelkit.hardware.what_if import MAX_GPUS, check_count, server_gpus, what_if


@pytest.mark.parametrize("count", [0, -1, MAX_GPUS + 1, 100_000, 10**12, 2.0, True, "8"])
def test_counts_outside_what_exists_are_refused_naming_the_range(count) -> None:
    with pytest.raises(ValueError, match=f"from 1 to {MAX_GPUS:,}"):
        what_if("L4", count)


def test_the_largest_what_if_has_links_only_within_servers() -> None:
    # Linear in the count (about a second to build): the pairs of each server of 16, not
    # the 134 million pairs of 16,384 GPUs.
    hardware = what_if("L4", MAX_GPUS)
    pairs_per_server = MAX_GPUS_PER_NODE * (MAX_GPUS_PER_NODE - 1) // 2
    assert len(hardware.links) == MAX_GPUS // MAX_GPUS_PER_NODE * pairs_per_server
    assert hardware.all_peers_reachable is True


@settings(max_examples=60, deadline=None)
@given(
    gpu=st.sampled_from(["H100 SXM", "A100-SXM4-80GB", "L4", "A100 PCIe", "RTX 4090"]),
    count=st.integers(1, 3 * MAX_GPUS_PER_NODE + 1),
)
def test_links_join_every_pair_of_a_server_and_none_across(gpu, count) -> None:
    hardware = what_if(gpu, count)
    size = server_gpus(specs.resolve(gpu)[0])  # an HGX board's 8 or 16, else 16 cards
    server = {g.index: g.index // size for g in hardware.gpus}
    pairs = {(link.a, link.b) for link in hardware.links}
    expected = {(a, b) for a in range(count) for b in range(a + 1, count) if server[a] == server[b]}
    assert pairs == expected
    assert hardware.servers == -(-count // size) and hardware.server_gpus == size
    assert hardware.gpus_per_server == min(count, size)


def test_sixteen_h100_sxm_are_two_hgx_servers_of_eight() -> None:
    hardware = what_if("H100 SXM", 16)  # HGX H100 boards hold 8: no server holds 16
    assert (hardware.servers, hardware.gpus_per_server) == (2, 8)
    assert hardware.all_nvlink and len(hardware.links) == 2 * 28  # none across servers
    assert "2 servers of up to 8" in hardware.notes[0]
    assert (
        "NVLink between every pair of a server, one NVLink domain of up to 8" in (hardware.notes[1])
    )
    assert what_if("A100-SXM4-80GB", 16).servers == 1  # the HGX A100 16-GPU board


def test_one_server_is_every_pair() -> None:
    hardware = what_if("NVIDIA H200", 8)
    assert len(hardware.links) == 28 and hardware.all_nvlink


def test_check_count_names_what_it_checks() -> None:
    with pytest.raises(
        ValueError, match="--count=17 is not valid; use a whole number from 1 to 16"
    ):
        check_count(17, MAX_GPUS_PER_NODE, "--count")
    assert check_count(16, MAX_GPUS_PER_NODE) == 16


def test_a_snapshot_without_a_server_size_spans_servers_of_the_most_one_holds() -> None:
    snapshot = HardwareInfo.from_dict(what_if("L4", 32).to_dict() | {"server_gpus": None})
    assert (snapshot.servers, snapshot.gpus_per_server) == (2, MAX_GPUS_PER_NODE)
    assert HardwareInfo.from_dict(what_if("H100 SXM", 16).to_dict()).servers == 2
    assert (HardwareInfo().servers, HardwareInfo().gpus_per_server) == (1, 0)
