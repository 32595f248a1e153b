"""The GPU datasheet table (`accelkit/specs/gpus.json`) and its exact matcher."""

from __future__ import annotations

import doctest
import itertools
import json
import math
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

import accelkit.specs
from accelkit.hardware import capabilities as caps
from accelkit.hardware.info import GpuInfo
from accelkit.specs import (
    DTYPES,
    all_specs,
    by_key,
    for_gpu,
    lookup,
    normalize,
    suggest,
    unknown_message,
)

GIB = 2**30
MIB = 2**20


def _raw_rows() -> list[dict]:
    text = resources.files("accelkit.specs").joinpath("gpus.json").read_text(encoding="utf-8")
    return json.loads(text)["gpus"]


RAW = _raw_rows()
SPECS = all_specs()


def _close(a: float, b: float, rel: float = 0.01) -> bool:
    return math.isclose(a, b, rel_tol=rel)


# ---------------------------------------------------------------- the table itself

REQUIRED_KEYS = [
    "p100-pcie-12gb",
    "p100-pcie-16gb",
    "p100-sxm2-16gb",
    "v100-sxm2-16gb",
    "v100-sxm2-32gb",
    "v100-pcie-16gb",
    "v100-pcie-32gb",
    "v100s-pcie-32gb",
    "t4",
    "a100-sxm4-40gb",
    "a100-sxm4-80gb",
    "a100-pcie-40gb",
    "a100-pcie-80gb",
    "a30",
    "a40",
    "a10",
    "a10g",
    "a16",
    "a2",
    "l4",
    "l40",
    "l40s",
    "h100-sxm",
    "h100-pcie",
    "h100-nvl",
    "h200-sxm",
    "h200-nvl",
    "h20",
    "gh200",
    "b200",
    "gb200",
    "rtx-a4000",
    "rtx-a5000",
    "rtx-a6000",
    "rtx-6000-ada",
    "rtx-2060",
    "rtx-2070",
    "rtx-2080",
    "rtx-2080-super",
    "rtx-2080-ti",
    "rtx-3060",
    "rtx-3060-ti",
    "rtx-3070",
    "rtx-3070-ti",
    "rtx-3080-10gb",
    "rtx-3080-12gb",
    "rtx-3080-ti",
    "rtx-3090",
    "rtx-3090-ti",
    "rtx-4060",
    "rtx-4060-ti-8gb",
    "rtx-4060-ti-16gb",
    "rtx-4070",
    "rtx-4070-super",
    "rtx-4070-ti",
    "rtx-4070-ti-super",
    "rtx-4080",
    "rtx-4080-super",
    "rtx-4090",
    "rtx-5070",
    "rtx-5070-ti",
    "rtx-5080",
    "rtx-5090",
    # issue 13, item 22: Pascal and Turing consumer cards, the TITANs, the RTX 4090 D, the H800
    "gtx-1080-ti",
    "gtx-1080",
    "gtx-1070",
    "gtx-1060-6gb",
    "gtx-1050-ti",
    "gtx-1660-ti",
    "gtx-1660-super",
    "gtx-1660",
    "gtx-1650",
    "titan-xp",
    "titan-v",
    "rtx-4090-d",
    "h800-sxm",
    # Blackwell Ultra and the RTX PRO 6000 Blackwell: named, peaks not yet confirmed
    "b300",
    "gb300",
    "rtx-pro-6000-workstation",
    "rtx-pro-6000-server",
]


def test_every_required_gpu_has_a_row_and_keys_are_unique():
    keys = [spec.key for spec in SPECS]
    assert len(keys) == len(set(keys))
    assert sorted(set(REQUIRED_KEYS) - set(keys)) == []


def test_rows_are_read_once():
    assert all_specs()[0] is all_specs()[0]


def test_by_key():
    assert by_key("h100-sxm").name == "NVIDIA H100 SXM5 80GB"
    assert by_key("h100") is None  # an alias, not a key


def _expected_cc(spec) -> tuple[int, int]:
    if spec.architecture == "ampere":
        return (8, 0) if spec.key.startswith(("a100", "a30")) else (8, 6)
    if spec.architecture == "pascal":
        return (6, 0) if spec.segment == "datacenter" else (6, 1)  # GP100 vs GP10x
    if spec.architecture == "blackwell":
        if spec.key.startswith("rtx"):  # GB20x: GeForce RTX 50 and RTX PRO Blackwell
            return (12, 0)
        return (10, 3) if spec.key in ("b300", "gb300") else (10, 0)  # Blackwell Ultra: 10.3
    return {
        "volta": (7, 0),
        "turing": (7, 5),
        "ada": (8, 9),
        "hopper": (9, 0),
    }[spec.architecture]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.key)
def test_row_sanity(spec):
    peaks = spec.peak_tflops
    cc = spec.compute_capability
    assert spec.compute_capability == _expected_cc(spec)
    assert spec.segment in ("datacenter", "workstation", "geforce")
    assert set(peaks) <= set(DTYPES)
    assert all(value > 0 for value in peaks.values()), "absent, never 0"
    memory_bandwidth_and_power = (spec.memory_gb, spec.bandwidth_gbps, spec.tdp_w)
    assert all(value is None or value > 0 for value in memory_bandwidth_and_power)
    assert spec.source.strip() and "https://" in spec.source
    if spec.peaks_unknown:  # a known name without public figures: say so, list none
        assert "Peaks unknown" in spec.notes, "say why no peak is listed"
        return
    assert {"fp64", "fp32"} <= set(peaks)
    # fp16 is listed for tensor cores (and the P100's fast half2 path); Pascal GP10x
    # consumer cards run fp16 at 1/64 of fp32 and GTX 16 cards have no tensor cores.
    tensor_cores = caps.has_tensor_cores(cc, spec.name)
    assert ("fp16" in peaks) == (tensor_cores or spec.key.startswith("p100")), spec.key
    if "fp16" not in peaks:
        assert "No fp16" in spec.notes, "say in notes why fp16 is missing"
    else:  # fp16 >= fp32 holds only for chips with fast fp16, which are the ones listing it
        assert peaks["fp16"] >= peaks["fp32"]
    assert ("tf32" in peaks) == (cc >= (8, 0))
    assert ("bf16" in peaks) == (cc >= (8, 0))
    assert ("fp8" in peaks) == (cc >= (8, 9))
    if cc < (7, 5) or not tensor_cores:
        assert "int8" not in peaks
    assert None not in memory_bandwidth_and_power, "every row with peaks has these figures"


@pytest.mark.parametrize("row", RAW, ids=lambda r: r["key"])
def test_int8_left_out_only_with_a_reason(row):
    peaks = row["peak_tflops"]
    if peaks and tuple(row["compute_capability"]) >= (7, 5) and "int8" not in peaks:
        assert "int8" in row.get("notes", ""), "say in notes why int8 is missing"


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.key)
def test_tensor_rate_ratios(spec):
    """Catch a sparse figure entered as dense, or a GeForce fp16-accumulate figure.

    Tensor cores do tf32 at half, fp8 at twice the fp16 rate. int8 runs at the
    fp16-accumulate rate x2: GeForce halves fp32 accumulate, so there int8 = 4 x fp16.
    """
    peaks = spec.peak_tflops
    if "tf32" in peaks:
        assert _close(peaks["tf32"], peaks["fp16"] / 2, rel=0.03)
    if "fp8" in peaks:
        assert _close(peaks["fp8"], 2 * peaks["fp16"])
    if "int8" in peaks:
        factor = 4 if spec.segment == "geforce" else 2
        assert _close(peaks["int8"], factor * peaks["fp16"])


def test_geforce_fp16_is_the_fp32_accumulate_rate():
    rtx4090 = by_key("rtx-4090")
    assert rtx4090.peak("fp16") == 165.2
    assert rtx4090.peak("int8") / 2 == pytest.approx(330.3)  # the fp16-accumulate rate
    assert rtx4090.peak("fp8") == 330.3
    assert by_key("rtx-3090").peak("bf16") == 71


def test_consumer_pascal_turing_and_titan_rows():
    """Issue 13, item 22: fp32 = 2 x CUDA cores x boost clock, no tensor figures without
    tensor cores, the TITAN V's 110 TFLOPS tensor figure, and the H800 named without peaks."""
    gtx1080ti = by_key("gtx-1080-ti")
    assert gtx1080ti.peak("fp32") == pytest.approx(2 * 3584 * 1.582e-3, abs=0.01)
    assert gtx1080ti.compute_capability == (6, 1) and gtx1080ti.peak("fp16") is None
    assert lookup("NVIDIA GeForce GTX 1660 SUPER").peak("fp16") is None
    assert lookup("titan v").peak("fp16") == 110
    assert lookup("NVIDIA GeForce RTX 4090 D").peak("bf16") == pytest.approx(
        by_key("rtx-4090").peak("bf16") * 114 / 128, abs=0.1
    )
    h800 = lookup("NVIDIA H800")
    assert h800.key == "h800-sxm" and h800.peaks_unknown and h800.peak("bf16") is None
    assert "Peaks unknown" in h800.notes


def test_headline_figures():
    a100 = by_key("a100-sxm4-80gb")
    assert (a100.peak("bf16"), a100.peak("fp32"), a100.peak("tf32")) == (312, 19.5, 156)
    assert a100.peak("fp8") is None
    h100 = by_key("h100-sxm")
    assert h100.peak("bf16") == pytest.approx(989.45, abs=0.06)  # 989.4 or 989.5
    assert h100.peak("fp8") == pytest.approx(1978.9)
    h200 = by_key("h200-sxm")
    assert h200.peak_tflops == h100.peak_tflops
    assert (h200.memory_gb, h200.bandwidth_gbps) == (141, 4800)
    assert by_key("t4").peak("bf16") is None
    assert by_key("v100-sxm2-16gb").peak("tf32") is None


def test_interconnect_and_ecc_rules():
    nvlink_geforce = {"rtx-2080", "rtx-2080-super", "rtx-2080-ti", "rtx-3090"}
    for spec in SPECS:
        if spec.segment == "geforce":
            assert not spec.ecc, spec.key
            assert spec.p2p == (spec.key in nvlink_geforce), spec.key
            assert (spec.nvlink_gbps is not None) == spec.p2p, spec.key
        else:
            assert spec.ecc and spec.p2p, spec.key
    rtx_40_50 = [s for s in SPECS if s.key.startswith(("rtx-4", "rtx-5"))]
    assert len(rtx_40_50) == 15 and not any(s.p2p for s in rtx_40_50)


def test_interconnect_figures_say_where_they_come_from():
    # NVLink domains are bridges (2, 4) or boards and racks (8, 16, 72); PCIe figures are
    # the x16 links of Gen3, 4 and 5 (32, 64, 128 GB/s both ways), or Gen4 x8 (32).
    for spec in SPECS:
        if spec.nvlink_gbps is None:
            assert spec.nvlink_gpus is None, spec.key
        else:
            assert spec.nvlink_gpus in {2, 4, 8, 16, 72} or spec.key.startswith("gh200"), spec.key
        assert spec.pcie_gbps in {None, 32, 64, 128}, spec.key
        if spec.nvlink_gpus is not None or spec.pcie_gbps is not None:
            assert spec.interconnect_source.strip(), spec.key
    cards = [
        s
        for s in SPECS
        if s.segment != "geforce" and (s.nvlink_gpus or 0) < 8 and not s.key.startswith("gh200")
    ]
    assert len(cards) > 20
    for spec in cards:  # a ring of cards beyond a bridge runs over PCIe: a figure, or why not
        assert spec.pcie_gbps is not None or "no" in spec.interconnect_source, spec.key
    assert by_key("l4").pcie_gbps == 64 and by_key("h100-sxm").nvlink_gpus == 8
    assert by_key("a100-pcie-80gb").nvlink_gpus == 2 and by_key("h200-nvl").nvlink_gpus == 4


def test_a_fixed_server_size_divides_its_nvlink_domain_and_says_where_it_comes_from():
    fixed = [s for s in SPECS if s.server_gpus is not None]
    assert [s.key for s in fixed] == ["gb200", "gb300"]  # a compute tray of an NVL72 rack
    for spec in fixed:
        assert spec.nvlink_gpus and spec.nvlink_gpus % spec.server_gpus == 0, spec.key
        assert "accelerators_per_node" in spec.interconnect_source, spec.key
    assert by_key("gb200").server_gpus == 4 and by_key("gb200").nvlink_gpus == 72
    assert by_key("gb300").server_gpus == 4 and by_key("gb300").nvlink_gpus == 72


def test_to_dict_is_json_ready():
    data = by_key("h100-nvl").to_dict()
    assert json.loads(json.dumps(data))["compute_capability"] == [9, 0]
    assert data["peak_tflops"]["fp8"] == 1670.5


# ---------------------------------------------------------------- names are unambiguous


def _match_names(row: dict) -> list[str]:
    return [*row["nvml_names"], row["name"], row["key"], *row.get("aliases", ())]


def _separated(a: dict, b: dict) -> bool:
    for field in ("memory_gb_range", "power_limit_w_range"):
        if field in a and field in b:
            (lo_a, hi_a), (lo_b, hi_b) = a[field], b[field]
            if hi_a < lo_b or hi_b < lo_a:
                return True
    return False


def test_shared_names_are_told_apart_by_disjoint_ranges():
    rows_by_name: dict[str, list[dict]] = {}
    for row in RAW:
        for name in {normalize(n) for n in _match_names(row)}:
            rows_by_name.setdefault(name, []).append(row)
    shared = {name: rows for name, rows in rows_by_name.items() if len(rows) > 1}
    assert "h100" in shared and "rtx 3080" in shared  # the check below is not vacuous
    for name, rows in shared.items():
        for a, b in itertools.combinations(rows, 2):
            assert _separated(a, b), f"{name!r}: {a['key']} and {b['key']} overlap"


def _midpoint(row: dict, field: str) -> float | None:
    return sum(row[field]) / 2 if field in row else None


@pytest.mark.parametrize("row", RAW, ids=lambda r: r["key"])
def test_every_nvml_name_finds_its_row(row):
    memory = _midpoint(row, "memory_gb_range")
    power = _midpoint(row, "power_limit_w_range")
    for nvml_name in row["nvml_names"]:
        found = lookup(
            nvml_name,
            memory_bytes=None if memory is None else int(memory * GIB),
            power_limit_w=power,
        )
        assert found is not None and found.key == row["key"], nvml_name


# ---------------------------------------------------------------- matching


@pytest.mark.parametrize(
    ("nvml_name", "key"),
    [
        ("NVIDIA H200", "h200-sxm"),
        ("NVIDIA H200 NVL", "h200-nvl"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H100 NVL", "h100-nvl"),
        ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"),
        ("NVIDIA A100-SXM4-40GB", "a100-sxm4-40gb"),
        ("NVIDIA A100-PCIE-40GB", "a100-pcie-40gb"),
        ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"),
        ("Tesla V100-SXM2-16GB", "v100-sxm2-16gb"),
        ("Tesla V100-SXM2-32GB", "v100-sxm2-32gb"),
        ("Tesla V100S-PCIE-32GB", "v100s-pcie-32gb"),
        ("Tesla P100-PCIE-16GB", "p100-pcie-16gb"),
        ("Tesla T4", "t4"),
        ("NVIDIA GeForce RTX 4090", "rtx-4090"),
        ("GeForce RTX 2080 Ti", "rtx-2080-ti"),  # drivers before 460 had no "NVIDIA"
        ("NVIDIA GeForce RTX 4070 Ti SUPER", "rtx-4070-ti-super"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA A10G", "a10g"),
        ("NVIDIA RTX 6000 Ada Generation", "rtx-6000-ada"),
        ("NVIDIA RTX A6000", "rtx-a6000"),
        ("NVIDIA GH200 480GB", "gh200"),
        ("NVIDIA GH200 144G HBM3e", "gh200-144gb"),
        ("NVIDIA B200", "b200"),
        ("NVIDIA GB200", "gb200"),
        ("NVIDIA H20", "h20"),
        ("NVIDIA B300 SXM6 AC", "b300"),
        ("NVIDIA GB300", "gb300"),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "rtx-pro-6000-workstation"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000-server"),
    ],
)
def test_nvml_names_as_reported(nvml_name, key):
    assert lookup(nvml_name).key == key


@pytest.mark.parametrize(
    ("typed", "key"),
    [
        ("h100-sxm", "h100-sxm"),
        ("A100-SXM4-80GB", "a100-sxm4-80gb"),
        ("a100 80gb sxm", "a100-sxm4-80gb"),
        ("a100 80 GB sxm", "a100-sxm4-80gb"),
        ("rtx 4090", "rtx-4090"),
        ("RTX_4080_SUPER", "rtx-4080-super"),
        ("h200", "h200-sxm"),
        ("l40s", "l40s"),
        ("nvidia t4", "t4"),
        ("b300", "b300"),
        ("B300 SXM6", "b300"),
        ("gb300", "gb300"),
        ("RTX PRO 6000", "rtx-pro-6000-workstation"),
        ("rtx pro 6000 server", "rtx-pro-6000-server"),
    ],
)
def test_keys_display_names_and_aliases(typed, key):
    assert lookup(typed).key == key


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("NVIDIA A10", "NVIDIA A100-SXM4-80GB"),
        ("NVIDIA L4", "NVIDIA L40"),
        ("NVIDIA L4", "NVIDIA L40S"),
        ("NVIDIA L40", "NVIDIA L40S"),
        ("NVIDIA H20", "NVIDIA H200"),
        ("NVIDIA B200", "NVIDIA GB200"),
        ("NVIDIA GeForce RTX 4080", "NVIDIA GeForce RTX 4080 SUPER"),
        ("NVIDIA GeForce RTX 3070", "NVIDIA GeForce RTX 3070 Ti"),
        ("NVIDIA RTX A6000", "NVIDIA RTX 6000 Ada Generation"),
    ],
)
def test_collision_pairs_stay_apart(a, b):
    found_a, found_b = lookup(a), lookup(b)
    assert found_a is not None and found_b is not None
    assert found_a.key != found_b.key
    assert found_a.peak_tflops != found_b.peak_tflops or found_a.memory_gb != found_b.memory_gb


@pytest.mark.parametrize(
    "prefix",
    [
        "a1",
        "a10 0",
        "l",
        "h2",
        "b20",
        "b30",
        "rtx 408",
        "NVIDIA GeForce RTX",
        "H100 SXM5 80",
        "rtx pro",
    ],
)
def test_no_prefix_or_substring_matching(prefix):
    assert lookup(prefix) is None


@pytest.mark.parametrize(
    ("new", "older"),
    [
        ("NVIDIA B300 SXM6 AC", "NVIDIA B200"),
        ("NVIDIA GB300", "NVIDIA GB200"),
        ("b300", "b200"),
        ("gb300", "gb200"),
    ],
)
def test_blackwell_ultra_is_not_blackwell(new, older):
    """Blackwell Ultra (10.3) names find their own rows, never the B200's or GB200's figures:
    the Ultra cut FP64 and INT8, so a B200 peak would be wrong for a B300."""
    ultra, blackwell = lookup(new), lookup(older)
    assert ultra.key != blackwell.key
    assert ultra.compute_capability == (10, 3) and blackwell.compute_capability == (10, 0)
    assert ultra.peak_tflops != blackwell.peak_tflops
    assert ultra.memory_gb == 288 and ultra.memory_gb > blackwell.memory_gb


def test_b300_is_not_gb300():
    """The HGX board's GPU and the superchip's share a name's tail, not a row: 8 GPUs on an
    NVSwitch board against a 72-GPU rack of 4-GPU trays."""
    b300, gb300 = lookup("NVIDIA B300 SXM6 AC"), lookup("NVIDIA GB300")
    assert (b300.key, gb300.key) == ("b300", "gb300")
    assert (b300.nvlink_gpus, b300.server_gpus) == (8, None)
    assert (gb300.nvlink_gpus, gb300.server_gpus) == (72, 4)


@pytest.mark.parametrize(
    "key", ["b300", "gb300", "rtx-pro-6000-workstation", "rtx-pro-6000-server"]
)
def test_rows_named_before_their_peaks_are_confirmed(key):
    """These rows carry names, compute capability and memory from NVIDIA documents; their peaks
    await a datasheet, so MFU is None with the reason rather than a guessed figure."""
    spec = by_key(key)
    assert spec.peaks_unknown and spec.peak("bf16") is None and spec.peak("fp8") is None
    assert spec.notes.startswith("Peaks unknown") and "https://" in spec.source
    assert spec.ecc and spec.p2p


def test_rtx_pro_6000_editions_by_their_own_names():
    """The NVML names of the editions differ; the plain short name is the Workstation Edition's
    only (as 'h200' is the SXM's), since the editions share 96 GB and no confirmed power limit,
    and the Max-Q edition, which has no row, is unknown rather than another edition."""
    workstation = lookup("NVIDIA RTX PRO 6000 Blackwell Workstation Edition")
    server = lookup("NVIDIA RTX PRO 6000 Blackwell Server Edition")
    assert (workstation.segment, server.segment) == ("workstation", "datacenter")
    assert workstation.compute_capability == server.compute_capability == (12, 0)
    assert workstation.memory_gb == server.memory_gb == 96
    assert lookup("rtx pro 6000") == workstation
    for power in (None, 300, 600):  # the Server Edition's own name wins at any power limit
        found = lookup(
            "NVIDIA RTX PRO 6000 Blackwell Server Edition",
            memory_bytes=97887 * MIB,
            power_limit_w=power,
        )
        assert found == server
    assert lookup("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition") is None
    assert lookup("NVIDIA GeForce RTX 5090") not in (workstation, server)


def test_rtx_3080_told_apart_by_memory():
    name = "NVIDIA GeForce RTX 3080"  # both memory sizes report this name
    assert lookup(name, memory_bytes=10240 * MIB).key == "rtx-3080-10gb"
    assert lookup(name, memory_bytes=12288 * MIB).key == "rtx-3080-12gb"
    assert lookup(name) is None
    assert lookup(name, memory_bytes=16 * GIB) is None


@pytest.mark.parametrize(
    ("memory_mib", "power_w", "key"),
    [
        (81559, 700, "h100-sxm"),
        (81559, 350, "h100-pcie"),
        (81559, 310, "h100-pcie"),
        # A 94 GB "NVIDIA H100" is the H100 SXM5 94GB (PCI 0x2339), not the NVL (which
        # NVML names "NVIDIA H100 NVL"): no datasheet row, so unknown, never NVL figures.
        (95830, 400, None),
        (95830, 350, None),
        (95830, None, None),
        (81559, None, None),  # SXM or PCIe: no guess
        (65536, 700, None),  # no 64 GB row
        (95830, 700, None),  # 94 GB at 700 W is none of the three
    ],
)
def test_h100_variants_by_memory_and_power(memory_mib, power_w, key):
    found = lookup("NVIDIA H100", memory_bytes=memory_mib * MIB, power_limit_w=power_w)
    assert (found and found.key) == key


def test_the_h100_nvl_is_found_by_its_own_name_at_any_power_limit():
    for power in (None, 350, 400):
        found = lookup("NVIDIA H100 NVL", memory_bytes=95830 * MIB, power_limit_w=power)
        assert found.key == "h100-nvl"
    assert lookup("h100 nvl").key == "h100-nvl"


def test_h200_variants_by_name_not_by_a_capped_power_limit():
    # Capping an H200 SXM at 500 W does not make it an H200 NVL: a unique NVML name wins.
    assert lookup("NVIDIA H200", memory_bytes=143771 * MIB, power_limit_w=500).key == "h200-sxm"
    assert lookup("NVIDIA H200 NVL", memory_bytes=143771 * MIB, power_limit_w=600).key == "h200-nvl"
    assert by_key("h200-sxm").tdp_w > by_key("h200-nvl").tdp_w


def test_a100_alias_by_memory_and_power():
    assert lookup("a100", memory_bytes=40 * GIB, power_limit_w=400).key == "a100-sxm4-40gb"
    assert lookup("a100", memory_bytes=80 * GIB, power_limit_w=300).key == "a100-pcie-80gb"
    assert lookup("a100", memory_bytes=80 * GIB) is None


@pytest.mark.parametrize(
    "name",
    [
        "NVIDIA H2000",
        "",
        "   ",
        "NVIDIA GeForce RTX 4090 Laptop GPU",
        "NVIDIA A100-SXM-64GB",  # known names whose figures have no public source
        "NVIDIA H800 PCIe",
        "NVIDIA GeForce GTX 1060 3GB",  # 1152 cores, not the 6 GB card's 1280
        "Quadro RTX 6000",
        "NVIDIA H20-3e",
        "AMD Instinct MI300X",
    ],
)
def test_unknown_names_give_none(name):
    assert lookup(name) is None


def test_for_gpu_uses_name_memory_and_power():
    gpu = GpuInfo(index=0, name="NVIDIA GeForce RTX 3080", memory_bytes=12288 * MIB)
    assert for_gpu(gpu).key == "rtx-3080-12gb"
    sxm = GpuInfo(
        index=0, name="NVIDIA H100 80GB HBM3", memory_bytes=81559 * MIB, power_limit_w=700
    )
    assert for_gpu(sxm).key == "h100-sxm"
    assert for_gpu(GpuInfo(index=0, name="NVIDIA H2000")) is None


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("NVIDIA A100-SXM4-80GB", "a100 sxm4 80gb"),
        ("Tesla V100-SXM2-16GB", "v100 sxm2 16gb"),
        ("NVIDIA GeForce RTX 4080 SUPER", "rtx 4080 super"),
        ("NVIDIA RTX 6000 Ada Generation", "rtx 6000 ada"),
        ("NVIDIA H100 80 GB HBM3", "h100 80gb hbm3"),
        ("  h100__nvl ", "h100 nvl"),
        ("Quadro RTX 8000", "rtx 8000"),
    ],
)
def test_normalize(raw, normal):
    assert normalize(raw) == normal


# ---------------------------------------------------------------- messages


def test_suggest_nearest_names():
    assert suggest("NVIDIA H2000")[0] == "NVIDIA H200 SXM 141GB"
    assert "NVIDIA GeForce RTX 4080 SUPER" in suggest("rtx 4080 supr")
    assert "NVIDIA L40S" in suggest("L40-S")
    assert len(suggest("rtx 40", n=2)) <= 2
    assert suggest("zzzz") == []


def test_unknown_message_names_the_gpu_and_the_nearest_rows():
    message = unknown_message("NVIDIA H2000")
    assert "'NVIDIA H2000'" in message and "NVIDIA H200 SXM 141GB" in message
    assert "accelkit specs" in message


def test_unknown_message_for_an_ambiguous_name_lists_the_rows():
    message = unknown_message("h100")
    for key in ("h100-sxm", "h100-pcie"):
        assert by_key(key).name in message
    assert by_key("h100-nvl").name not in message  # the NVL answers to its own name only


def test_docstring_examples():
    assert doctest.testmod(accelkit.specs).failed == 0


def test_docs_table_is_up_to_date():
    script = Path(__file__).resolve().parents[2] / "scripts" / "specs_table.py"
    result = subprocess.run(
        [sys.executable, str(script), "--check"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("spec", all_specs(), ids=lambda spec: spec.key)
def test_every_key_names_its_row(spec) -> None:
    # "gh200" is the 96 GB row's key and also an alias of the 144 GB row: the key wins,
    # so what_if and project, which look a row up again by its key, find it.
    assert lookup(spec.key) == spec
