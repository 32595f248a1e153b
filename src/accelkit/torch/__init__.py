"""PyTorch side of accelkit: the profiled `fit`, and `Meter` and `tune` for hand-written loops.

Importing this module imports torch.
"""

from accelkit.torch.meter import Meter
from accelkit.torch.training import fit, tune
from accelkit.torch.trials import TuneResult

__all__ = ["Meter", "TuneResult", "fit", "tune"]
