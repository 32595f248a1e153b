"""Plain-text tables for terminals."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from accelkit.hardware.info import HardwareInfo
    from accelkit.planning.types import Plan

REASON_WIDTH = 72


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], *,
          wrap_last: int | None = None) -> str:
    """Left-aligned columns; the last column wrapped at `wrap_last` characters."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers[:-1])]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers[:-1], widths)) + "  " + headers[-1]]
    lines.append("  ".join("-" * w for w in widths) + "  " + "-" * len(headers[-1]))
    for row in rows:
        last = textwrap.wrap(row[-1], wrap_last) if wrap_last else [row[-1]]
        last = last or [""]
        lead = "  ".join(c.ljust(w) for c, w in zip(row[:-1], widths))
        lines.append(f"{lead}  {last[0]}")
        pad = " " * (len(lead) + 2)
        lines.extend(pad + more for more in last[1:])
    return "\n".join(lines)


def describe_hardware(hardware: HardwareInfo) -> str:
    if not hardware.gpus:
        return "no NVIDIA GPU"
    names: dict[str, int] = {}
    for gpu in hardware.gpus:
        names[gpu.name] = names.get(gpu.name, 0) + 1
    parts = []
    for name, count in names.items():
        cc = next(g.compute_capability for g in hardware.gpus if g.name == name)
        cc_text = f", cc {cc[0]}.{cc[1]}" if cc else ""
        parts.append(f"{count} x {name}{cc_text}")
    return "; ".join(parts)


def _value(value: object) -> str:
    text = str(value)
    return text if len(text) <= 48 else text[:45] + "..."


def render_plan(plan: Plan) -> str:
    head = (f"accelkit plan: {plan.framework.value}, precision {plan.precision.value}, "
            f"distribution {plan.distribution.value} -- {describe_hardware(plan.hardware)} "
            f"({plan.hardware.source})")
    rows = []
    for s in plan.settings:
        status = s.status.value
        reason = s.reason if not s.detail else f"{s.reason} [{s.detail}]"
        rows.append((s.key, _value(s.value), status, reason))
    body = table(("setting", "value", "status", "reason"), rows, wrap_last=REASON_WIDTH)
    notes = "".join(f"\nnote: {n}" for n in plan.notes)
    return f"{head}\n{body}{notes}"
