"""PyTorch side of accelkit: the profiled `fit` and the `Meter` for hand-written loops.

Importing this module imports torch.
"""

from accelkit.torch.training import fit
from accelkit.torch.meter import Meter

__all__ = ["Meter", "fit"]
