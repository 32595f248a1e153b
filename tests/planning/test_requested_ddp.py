"""A layout the user asks for is planned as asked, with its memory numbers: DDP where
FSDP2 would leave more room (the planner's reserve for unknown activations is cautious,
and users measure it), and where a whole replica cannot fit, a plan that says so rather
than a ValueError that named neither the numbers nor 'fsdp' (issue 40's benchmark)."""

from __future__ import annotations

import accelkit
from accelkit.planning import Distribution


def test_ddp_asked_for_where_fsdp2_leaves_more_room_is_planned_as_ddp() -> None:
    planned = accelkit.plan_for("H100", count=8, params=3.5e9, distribute="ddp")
    assert accelkit.plan_for("H100", count=8, params=3.5e9).memory.choice == "fsdp2"
    assert planned.distribution is Distribution.DDP
    assert planned.memory.choice == "ddp" and planned.memory.fits
    assert "1.10 GB left" in planned.memory.reason  # what the replica leaves, said


def test_ddp_asked_for_where_no_replica_fits_says_so_with_the_numbers() -> None:
    planned = accelkit.plan_for("H100", count=2, params=8e9, distribute="ddp")
    assert planned.distribution is Distribution.DDP
    assert not planned.memory.fits
    assert "160.00 GB as a whole replica" in planned.memory.reason
    assert "FSDP2 needs 3 of these GPUs" in planned.memory.reason
