"""A plan as the planner writes an FSDP2 choice, and the tiny GPT-2 sizes the trainers'
FSDP launch workers train (tests/hf/fsdp_worker.py, tests/lightning/fsdp_worker.py).

Import it as the workers import their helpers (``tests/helpers`` on ``sys.path``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from accelkit.planning.keys import Key
from accelkit.planning.types import Distribution, Setting

# (layers, width, heads, vocabulary, context, batch per rank, optimizer steps, distinct
# batches per rank): a few batches seen again each epoch, so the loss falls for sure.
SIZES = {"cpu": (2, 64, 2, 256, 32, 4, 8, 2), "cuda": (4, 256, 4, 2048, 128, 8, 24, 4)}


def sharded(plan: Any) -> Any:
    """`plan` as the planner writes an FSDP2 choice (its helper keys of issue 26)."""
    extra = (
        Setting(Key.SHARDING, "fsdp2", "test: shard"),
        Setting(Key.ACTIVATION_CHECKPOINTING, False, "test"),
    )
    kept = [s for s in plan.settings if s.key not in (Key.SHARDING, Key.ACTIVATION_CHECKPOINTING)]
    return dataclasses.replace(plan, distribution=Distribution.FSDP, settings=(*kept, *extra))
