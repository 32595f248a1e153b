"""PyTorch side of accelkit: the profiled `fit`, and `Meter` and `tune` for hand-written loops.

Importing this module imports torch.
"""

from accelkit.torch.fitting import fit, tune
from accelkit.torch.measuring.meter import Meter
from accelkit.torch.tuning.trials import TuneResult

__all__ = ["Meter", "TuneResult", "fit", "tune"]
