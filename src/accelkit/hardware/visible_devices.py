"""Which GPUs a process sees: CUDA's rules for CUDA_VISIBLE_DEVICES and
CUDA_DEVICE_ORDER, applied to the GPUs NVML lists.

Nothing here raises on bad input from the environment: an entry CUDA would
ignore becomes a note.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from accelkit.hardware.info import GpuInfo


def visible(
    gpus: Sequence[GpuInfo], cuda_visible_devices: str | None, notes: list[str] | None = None
) -> tuple[GpuInfo, ...]:
    """The GPUs CUDA will show the process, in CUDA's order.

    Follows CUDA's rules for CUDA_VISIBLE_DEVICES (as PyTorch's
    ``torch.cuda._parse_visible_devices`` mirrors them): a comma list of
    indices, ``GPU-`` or ``MIG-`` UUIDs, or unique UUID prefixes; unset means
    all; ``""`` or ``"-1"`` means none; the first invalid entry ends the list;
    a repeated device hides every device. A MIG UUID gives its parent GPU with
    only that slice in ``mig_slices``.

    Indices are taken in NVML's PCI order; that is CUDA's order only under
    CUDA_DEVICE_ORDER=PCI_BUS_ID or when the GPUs are alike (see
    `device_order_note`).

    Args:
        gpus: every GPU, in NVML order.
        cuda_visible_devices: the variable's value, or None when unset.
        notes: if given, why entries were dropped is appended here.

    Example:
        >>> gpus = [GpuInfo(index=i, name="NVIDIA H100", uuid=f"GPU-{i}aaa") for i in range(4)]
        >>> [g.index for g in visible(gpus, "2,0")]
        [2, 0]
    """
    if cuda_visible_devices is None:
        return tuple(gpus)
    notes = notes if notes is not None else []
    chosen: list[GpuInfo] = []
    for entry in (e.strip() for e in cuda_visible_devices.split(",")):
        gpu = _match(gpus, entry)
        if gpu is None:
            if entry and not entry.startswith("-"):  # "" and "-1" end the list on purpose
                notes.append(
                    f"CUDA_VISIBLE_DEVICES entry {entry!r} names no GPU; CUDA ignores it "
                    "and every entry after it"
                )
            break
        if any(_same_device(gpu, other) for other in chosen):
            notes.append(
                f"CUDA_VISIBLE_DEVICES={cuda_visible_devices!r} names a device twice; "
                "CUDA then shows no GPU"
            )
            return ()
        chosen.append(gpu)
    if gpus and not chosen:
        notes.append(f"CUDA_VISIBLE_DEVICES={cuda_visible_devices!r} hides all {len(gpus)} GPUs")
    return tuple(chosen)


def _match(gpus: Sequence[GpuInfo], entry: str) -> GpuInfo | None:
    if entry.startswith("MIG-"):
        return _match_mig(gpus, entry)
    if entry.startswith("GPU-"):
        found = [g for g in gpus if g.uuid and g.uuid.startswith(entry)]
        return found[0] if len(found) == 1 else None  # an ambiguous prefix is invalid
    index = _leading_integer(entry)
    return gpus[index] if index is not None and index < len(gpus) else None


def _match_mig(gpus: Sequence[GpuInfo], entry: str) -> GpuInfo | None:
    found = [
        (gpu, name, uuid)
        for gpu in gpus
        # strict=False: a snapshot may list the slices' names without their UUIDs
        for name, uuid in zip(gpu.mig_slices, gpu.mig_uuids, strict=False)
        if uuid and uuid.startswith(entry)
    ]
    if len(found) != 1:
        return None
    gpu, name, uuid = found[0]
    return dataclasses.replace(gpu, mig_slices=(name,), mig_uuids=(uuid,))


def _same_device(a: GpuInfo, b: GpuInfo) -> bool:
    return a.index == b.index and a.mig_uuids == b.mig_uuids


_ASCII_DIGITS = frozenset("0123456789")
_LONGEST_INDEX = 20  # digits of C's ULONG_MAX; a longer index names no GPU anyway


def _leading_integer(entry: str) -> int | None:
    """CUDA reads indices like C's strtoul: ``"1gpu"`` is 1, ``"gpu1"`` and ``"-1"`` are
    invalid, and only the ASCII digits count (``"²"`` and the Arabic-Indic ``"٣"``, which
    str.isdigit accepts, are invalid). An index too long to name a GPU is None."""
    digits = ""
    for char in entry.removeprefix("+"):
        if char not in _ASCII_DIGITS:
            break
        digits += char
    significant = digits.lstrip("0") or digits[:1]  # "000" is 0, "" is no index
    return int(significant) if 0 < len(significant) <= _LONGEST_INDEX else None


def device_order_note(gpus: Sequence[GpuInfo], environ: Mapping[str, str]) -> str | None:
    """A warning when CUDA's device order may differ from NVML's, else None.

    CUDA numbers devices fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID;
    NVML numbers them in PCI order. The two agree when all GPUs are the same
    model, so only mixed machines get the note.

    Example:
        >>> gpus = [GpuInfo(index=0, name="NVIDIA T4"), GpuInfo(index=1, name="NVIDIA A10")]
        >>> device_order_note(gpus, {}) is not None
        True
    """
    if environ.get("CUDA_DEVICE_ORDER", "").strip().upper() == "PCI_BUS_ID":
        return None
    if len({g.name for g in gpus}) <= 1:
        return None
    return (
        "GPUs of different models and CUDA_DEVICE_ORDER is not PCI_BUS_ID: CUDA numbers "
        "the fastest GPU first, so CUDA indices may not match NVML's order used here; "
        "set CUDA_DEVICE_ORDER=PCI_BUS_ID to make them agree"
    )
