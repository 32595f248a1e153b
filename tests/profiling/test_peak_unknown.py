"""A GPU known by name whose peaks no public source gives: MFU's peak is None, with the
row's own reason, never another card's figure."""

from __future__ import annotations

import accelkit
from accelkit.profiling.mfu import peak


def test_an_h800_has_no_peak_and_says_why() -> None:
    found = peak(accelkit.plan_for("H800").hardware, "bf16")
    assert found.tflops is None
    assert "H800" in found.source and "never the H100's" in found.source
