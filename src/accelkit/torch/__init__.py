"""PyTorch side of accelkit: the profiled `fit` and the `Meter` for hand-written loops.

Importing this module imports torch.
"""

from accelkit.torch.meter import Meter
from accelkit.torch.training import fit

__all__ = ["Meter", "fit"]
