"""The link a ring all-reduce runs on, from the datasheet row (issue 37's all-reduce term)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelkit import specs
from accelkit.hardware.info import MAX_GPUS_PER_NODE
from accelkit.hardware.interconnect import ring_link


@pytest.mark.parametrize(
    ("key", "count", "kind", "each_way"),
    [
        ("h100-sxm", 2, "NVLink", 450),  # 900 GB/s both ways, HGX board of 8
        ("h100-sxm", 8, "NVLink", 450),
        ("a100-sxm4-80gb", 16, "NVLink", 300),  # HGX A100 of 16
        ("v100-sxm2-32gb", 8, "NVLink", 150),
        ("gb200", 72, "NVLink", 900),  # one NVL72 rack
        ("a100-pcie-80gb", 2, "NVLink", 300),  # the 2-GPU bridge
        ("a100-pcie-80gb", 3, "PCIe", 32),  # beyond it: PCIe Gen4 x16
        ("h200-nvl", 4, "NVLink", 450),  # the 4-way bridge
        ("h200-nvl", 8, "PCIe", 64),  # PCIe Gen5 x16
        ("l4", 2, "PCIe", 32),
        ("l4", MAX_GPUS_PER_NODE, "PCIe", 32),
        ("t4", 4, "PCIe", 16),  # PCIe Gen3 x16
        ("rtx-3090", 2, "NVLink", 56.25),  # the bridge of two GeForce cards
    ],
)
def test_the_ring_runs_on_the_datasheets_link(key, count, kind, each_way) -> None:
    link = ring_link(specs.by_key(key), count)
    assert (link.kind, link.gbps_each_way) == (kind, each_way), link.why
    assert f"{each_way:g} GB/s each way" in link.why


@pytest.mark.parametrize(
    ("key", "count", "says"),
    [
        ("h100-sxm", 9, "more than the 8 one NVLink domain joins"),
        ("b200", 16, "network"),
        ("l4", MAX_GPUS_PER_NODE + 1, "span 2 servers"),
        ("rtx-3090", 3, "GeForce cards have no PCIe peer-to-peer"),
        ("rtx-4090", 2, "GeForce cards have no PCIe peer-to-peer"),
        ("gh200", 2, "does not say how many GPUs its NVLink joins"),
        ("a10g", 2, "gives no PCIe bandwidth"),
    ],
)
def test_no_figure_where_no_datasheet_gives_one(key, count, says) -> None:
    link = ring_link(specs.by_key(key), count)
    assert link.gbps_each_way is None and link.kind == "" and says in link.why, link.why


@given(spec=st.sampled_from(specs.all_specs()), count=st.integers(2, 64))
def test_more_gpus_never_get_a_faster_link(spec, count) -> None:
    fewer, more = ring_link(spec, count), ring_link(spec, count + 1)
    assert fewer.why and more.why
    if more.gbps_each_way is not None:
        assert fewer.gbps_each_way is not None and more.gbps_each_way <= fewer.gbps_each_way
