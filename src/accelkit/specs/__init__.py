"""The GPU datasheet table: `gpus.json` beside this file, read once and matched exactly.

Every row of `gpus.json` is one GPU model's dense peaks, memory, interconnect and
the datasheet they come from (the file's ``convention`` text says how figures are
stated). A name matches a row only when it equals, after `normalize`, one of the
row's NVML names, its display name, key or aliases: ``"a10"`` never finds the
A100, ``"l4"`` never the L40S. Where several rows share a name (``"h100"``, the
two RTX 3080 memory sizes) the memory size and power limit pick one; an unknown
or still ambiguous name gives None, never another GPU's numbers. Only for hardware
a user names (`resolve`: ``plan_for("H100")``, ``accelkit plan --gpu A100``) does
a short name give its most deployed variant, with a note naming the others.

    >>> from accelkit import specs
    >>> specs.lookup("NVIDIA H200").key
    'h200-sxm'
    >>> specs.lookup("NVIDIA GeForce RTX 3080", memory_bytes=12 * 2**30).key
    'rtx-3080-12gb'
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import re
from collections.abc import Iterable
from importlib import resources
from typing import Any, Protocol

from accelkit.specs.types import DTYPES, GpuSpec

__all__ = [
    "DTYPES",
    "GpuSpec",
    "all_specs",
    "by_key",
    "common_variants",
    "for_gpu",
    "lookup",
    "normalize",
    "resolve",
    "suggest",
    "unknown_message",
]

# Words that differ between driver versions and marketing ("Tesla T4" vs "NVIDIA T4",
# "GeForce RTX 2080 Ti" before driver 460) but never tell two models apart.
_NOISE_WORDS = frozenset({"nvidia", "tesla", "geforce", "quadro", "generation", "gpu"})
_GIB = 2**30


class _GpuLike(Protocol):
    # Read-only: a frozen GpuInfo matches.
    @property
    def name(self) -> str: ...
    @property
    def memory_bytes(self) -> int | None: ...
    @property
    def power_limit_w(self) -> float | None: ...


@dataclasses.dataclass(frozen=True)
class _Row:
    """A spec plus what matching needs and `GpuSpec` does not carry."""

    spec: GpuSpec
    names: frozenset[str]  # normalised NVML names, display name, key and aliases
    memory_gb_range: tuple[float, float] | None
    power_limit_w_range: tuple[float, float] | None


def normalize(name: str) -> str:
    """Fold a GPU name to the form matching compares: lowercase, vendor words dropped.

    Separators (``-``, ``_``, spaces, punctuation) become single spaces and ``"80 GB"``
    becomes ``"80gb"``; every token that tells models apart (``sxm4``, ``pcie``,
    ``nvl``, ``80gb``, ``ti``, ``super``) is kept.

    Example:
        >>> normalize("NVIDIA A100-SXM4-80GB")
        'a100 sxm4 80gb'
        >>> normalize("NVIDIA RTX 6000 Ada Generation")
        'rtx 6000 ada'
    """
    text = re.sub(r"[^a-z0-9.]+", " ", name.lower())
    text = re.sub(r"\b(\d+) gb\b", r"\1gb", text)
    return " ".join(word for word in text.split() if word not in _NOISE_WORDS)


@functools.lru_cache(maxsize=1)
def _document() -> dict[str, Any]:
    text = resources.files(__name__).joinpath("gpus.json").read_text(encoding="utf-8")
    return dict(json.loads(text))


@functools.lru_cache(maxsize=1)
def _table() -> tuple[_Row, ...]:
    return tuple(_row(entry) for entry in _document()["gpus"])


def _row(entry: dict[str, Any]) -> _Row:
    spec = GpuSpec(
        key=entry["key"],
        name=entry["name"],
        architecture=entry["architecture"],
        compute_capability=tuple(entry["compute_capability"]),
        segment=entry["segment"],
        memory_gb=entry["memory_gb"],
        bandwidth_gbps=entry["bandwidth_gbps"],
        nvlink_gbps=entry["nvlink_gbps"],
        p2p=entry["p2p"],
        ecc=entry["ecc"],
        tdp_w=entry["tdp_w"],
        peak_tflops=dict(entry["peak_tflops"]),
        source=entry["source"],
        notes=entry.get("notes", ""),
        nvlink_gpus=entry.get("nvlink_gpus"),
        server_gpus=entry.get("server_gpus"),
        pcie_gbps=entry.get("pcie_gbps"),
        interconnect_source=entry.get("interconnect_source", ""),
    )
    names = [*entry["nvml_names"], entry["name"], entry["key"], *entry.get("aliases", ())]
    return _Row(
        spec=spec,
        names=frozenset(normalize(n) for n in names),
        memory_gb_range=_range(entry.get("memory_gb_range")),
        power_limit_w_range=_range(entry.get("power_limit_w_range")),
    )


def _range(value: Iterable[float] | None) -> tuple[float, float] | None:
    if value is None:
        return None
    lo, hi = value
    return (float(lo), float(hi))


def all_specs() -> tuple[GpuSpec, ...]:
    """Every row of the table, in file order (read once, then cached: treat rows as read-only).

    Example:
        >>> len(all_specs()) > 50
        True
    """
    return tuple(row.spec for row in _table())


def by_key(key: str) -> GpuSpec | None:
    """The row whose stable key is `key`, e.g. ``by_key("h100-sxm")``; None if there is none."""
    return next((row.spec for row in _table() if row.spec.key == key), None)


def _candidates(name: str) -> list[_Row]:
    wanted = normalize(name)
    return [row for row in _table() if wanted in row.names] if wanted else []


def _inside(value: float, bounds: tuple[float, float] | None) -> bool:
    # A row without a range for this property cannot be ruled out by it.
    return bounds is None or bounds[0] <= value <= bounds[1]


def lookup(
    name: str, *, memory_bytes: int | None = None, power_limit_w: float | None = None
) -> GpuSpec | None:
    """The datasheet row for the GPU called `name`, or None when unknown or ambiguous.

    Matching is exact on the normalised name (no substrings, no prefixes). When
    several rows share that name, the row whose key it is wins; otherwise
    `memory_bytes` (total memory as NVML reports it) and `power_limit_w` choose: each
    one given must fall in the row's range. A single row is returned whatever they
    say, since a user may cap a known GPU's power limit.

    Example:
        >>> lookup("NVIDIA A100-SXM4-80GB").key
        'a100-sxm4-80gb'
        >>> lookup("h100", memory_bytes=80 * 2**30, power_limit_w=350).key
        'h100-pcie'
        >>> lookup("h100") is None  # the SXM5 and PCIe rows share the name
        True
        >>> lookup("NVIDIA A1000") is None
        True
    """
    if len(name) > 80:  # a name pasted by mistake is not echoed back whole
        name = name[:77] + "..."
    rows = _candidates(name)
    if len(rows) > 1:  # a row's own key names it alone ("gh200" is also the 144 GB's alias)
        rows = [r for r in rows if normalize(r.spec.key) == normalize(name)] or rows
    if len(rows) > 1:
        # Every given property must fit: a 94 GB part at 700 W is not an H100 NVL.
        if memory_bytes is not None:
            rows = [r for r in rows if _inside(memory_bytes / _GIB, r.memory_gb_range)]
        if power_limit_w is not None:
            rows = [r for r in rows if _inside(power_limit_w, r.power_limit_w_range)]
    return rows[0].spec if len(rows) == 1 else None


def resolve(name: str) -> tuple[GpuSpec | None, str]:
    """The row for a name a user typed, and a note when the name fits several rows.

    As `lookup`, except that a short name several rows answer to (``"H100"``,
    ``"A100"``, ``"V100 PCIe"``) gives its most deployed variant, by the rule
    ``gpus.json`` states (``common_variants_rule``: for datacenter GPUs the SXM module
    with the largest memory), with a note naming the others and how to ask for one.
    For hardware the user names (`what_if`, `accelkit plan --gpu`, projections), never
    for a detected GPU, which `for_gpu` matches by its properties.

    Returns:
        (the row or None when unknown, the note or "").

    Example:
        >>> spec, note = resolve("H100")
        >>> spec.key
        'h100-sxm'
        >>> print(note)  # doctest: +ELLIPSIS
        'H100' fits 2 datasheet rows: taken as NVIDIA H100 SXM5 80GB, the most deployed; ...
    """
    spec = lookup(name)
    key = _document().get("common_variants", {}).get(normalize(name))
    if spec is not None or key is None:
        return spec, ""
    chosen = by_key(key)
    others = [row.spec.name for row in _candidates(name) if row.spec.key != key]
    if chosen is None or not others:  # tests/specs keep the table whole
        return None, ""
    note = (
        f"{name!r} fits {len(others) + 1} datasheet rows: taken as {chosen.name}, the "
        f"most deployed; for another give its name ({', '.join(repr(o) for o in others)})"
    )
    return chosen, note


def common_variants() -> dict[str, str]:
    """Normalised short name -> key of the row `resolve` picks for it.

    Example:
        >>> common_variants()["h100"]
        'h100-sxm'
    """
    return dict(_document().get("common_variants", {}))


def for_gpu(gpu: _GpuLike) -> GpuSpec | None:
    """The row for a detected GPU (an `accelkit.hardware.info.GpuInfo` or alike).

    Example:
        >>> from accelkit.hardware.info import GpuInfo
        >>> for_gpu(GpuInfo(index=0, name="NVIDIA H100 NVL", memory_bytes=94 * 2**30)).key
        'h100-nvl'
    """
    return lookup(gpu.name, memory_bytes=gpu.memory_bytes, power_limit_w=gpu.power_limit_w)


@functools.lru_cache(maxsize=1)
def _display_names() -> dict[str, list[str]]:
    """Normalised name -> display names of the rows it matches."""
    index: dict[str, list[str]] = {}
    for row in _table():
        for key in row.names:
            index.setdefault(key, []).append(row.spec.name)
    return index


def suggest(name: str, n: int = 3) -> list[str]:
    """Up to `n` display names of rows whose names are closest to `name`, for error messages.

    Example:
        >>> suggest("NVIDIA H2000", n=1)
        ['NVIDIA H200 SXM 141GB']
    """
    index = _display_names()
    close = difflib.get_close_matches(normalize(name), index, n=len(index), cutoff=0.6)
    found: list[str] = []
    for key in close:
        for display in index[key]:
            if display not in found:
                found.append(display)
    return found[:n]


def unknown_message(name: str) -> str:
    """Why `lookup(name)` found no row, and what the user might have meant.

    Example:
        >>> print(unknown_message("NVIDIA H2000"))  # doctest: +ELLIPSIS
        No datasheet row for 'NVIDIA H2000'; nearest known: NVIDIA H200 SXM 141GB, ...
    """
    if len(name) > 80:  # a name pasted by mistake is not echoed back whole
        name = name[:77] + "..."
    rows = _candidates(name)
    if len(rows) > 1:
        listed = ", ".join(row.spec.name for row in rows)
        return (
            f"{name!r} matches several datasheet rows ({listed}); give the full name "
            "as nvidia-smi reports it, or the memory size and power limit"
        )
    nearest = suggest(name)
    hint = f"nearest known: {', '.join(nearest)}, ..." if nearest else "no similar name"
    return f"No datasheet row for {name!r}; {hint} (`accelkit specs` lists them)"
