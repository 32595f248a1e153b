"""A short name several datasheet rows share ("H100", "A100", "V100 PCIe") is, for hardware
a user names, its most deployed variant with a note naming the others (issue 25:
`accelkit plan --gpu H100 --count 8` exited 1). Checked for every such name in the
datasheet, against the rule gpus.json states; a detected GPU is never matched this way."""

from __future__ import annotations

import json
import re

import pytest

from accelkit import specs
from accelkit.cli import main
from accelkit.configure import plan_for
from accelkit.hardware.info import GpuInfo
from accelkit.hardware.what_if import what_if
from accelkit.specs import common_variants, normalize, resolve

pytestmark = pytest.mark.reliability


def _shared_names() -> dict[str, list[specs.GpuSpec]]:
    """Every name several rows answer to and no row's key settles (`lookup` gives None)."""
    rows: dict[str, list[specs.GpuSpec]] = {}
    for row in specs._table():
        for name in row.names:
            rows.setdefault(name, []).append(row.spec)
    return {n: r for n, r in rows.items() if len(r) > 1 and specs.lookup(n) is None}


SHARED = _shared_names()


def test_every_shared_name_has_a_common_variant_and_no_other_name_does() -> None:
    assert {"h100", "a100", "v100 pcie", "rtx 3080"} <= set(SHARED)  # not vacuous
    assert set(common_variants()) == set(SHARED)


@pytest.mark.parametrize("name", sorted(SHARED))
def test_a_shared_name_gives_its_variant_by_the_rule(name: str) -> None:
    rows = SHARED[name]
    chosen, note = resolve(name)
    assert chosen in rows
    # the note names every other row, each by a name that finds it alone
    for other in rows:
        if other is not chosen:
            assert repr(other.name) in note
            assert specs.lookup(other.name) == other
    assert chosen.name in note and "most deployed" in note
    if all(r.segment == "datacenter" for r in rows):  # the SXM module with the most memory
        sxm = [r for r in rows if "sxm" in r.key] or rows
        assert chosen.memory_gb == max(r.memory_gb for r in sxm)
        assert chosen in sxm
    # a what-if of it plans that GPU, and says so
    hardware = what_if(name.upper(), count=2)
    assert {g.name for g in hardware.gpus} == {chosen.name}
    assert note.replace(repr(name), repr(name.upper())) in hardware.notes


def test_a_full_name_and_a_detected_gpu_are_matched_exactly() -> None:
    assert resolve("NVIDIA H100 PCIe 80GB") == (specs.by_key("h100-pcie"), "")
    assert resolve("H100 SXM")[1] == ""
    assert resolve("NVIDIA H2000") == (None, "")
    assert specs.for_gpu(GpuInfo(0, "H100")) is None  # detection: unknown, never a guess


@pytest.mark.parametrize("name", ["H100", "A100", "a100 pcie", "V100"])
def test_plan_cli_for_a_short_name_exits_0_with_the_note(name: str, capsys) -> None:
    """Before: exit 1, "matches several datasheet rows ... the memory size and power
    limit" (flags the CLI does not have)."""
    assert main(["plan", "--gpu", name, "--count", "8", "--json"]) == 0
    out, err = capsys.readouterr()
    document = json.loads(out)
    chosen, note = resolve(name)
    assert len(document["hardware"]["gpus"]) == 8
    assert document["hardware"]["gpus"][0]["name"] == chosen.name
    assert note in document["notes"] and not err
    assert main(["plan", "--gpu", name, "--count", "8"]) == 0
    text = re.sub(r"\s+", " ", capsys.readouterr().out)
    assert "most deployed" in text


def test_plan_for_and_specs_take_the_same_variant(capsys) -> None:
    assert plan_for("H100", 8).hardware.gpus[0].name == specs.by_key("h100-sxm").name
    assert main(["specs", "--gpu", "A100", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["key"] == "a100-sxm4-80gb"
    assert "NVIDIA A100 PCIe 40GB" in err
    assert normalize("A100") in common_variants()
