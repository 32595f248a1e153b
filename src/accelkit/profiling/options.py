"""`MeterOptions`: what every measuring door takes, validated once, with one set of
defaults: `accelkit.torch.Meter`, both fits, `accelkit.keras.ProfileCallback` and the
Lightning and Hugging Face callbacks pass their ``**options`` here.

=====================  ===========================================================
option                 meaning
=====================  ===========================================================
``plan``               the plan in force (default: the last ``auto_configure()``
                       plan, else a fresh, unapplied one for the detected hardware)
``flops_per_step``     FLOPs of one training step, if known; counted otherwise
``tokens_per_sample``  tokens in one sample, for tokens/s (found for integer (B, T)
                       token ids otherwise)
``warmup``             steps left out of the steady-state figures (at least 1 when
                       FLOPs are counted: the counted step runs slower)
``window``             steps between device synchronisations (and logged rows)
``sample_gpu``         sample NVML in a background thread
``calibrate``          measure the achievable matmul rate after the run
``single_device``      the same run on one device, for ``scaling_efficiency``:
                       samples/s, a `RunReport` or the path of a saved one
=====================  ===========================================================
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from accelkit.planning import Plan
from accelkit.profiling import world
from accelkit.utils import arguments


@dataclasses.dataclass(frozen=True)
class MeterOptions:
    """The measurement options of every door (the table above), checked when built.

    Raises:
        ValueError: a number out of range, naming the option and the valid range.
        TypeError: an option of the wrong type.

    Example:
        >>> MeterOptions(window=10).warmup
        3
        >>> MeterOptions(window=0)
        Traceback (most recent call last):
        ...
        ValueError: window=0 must be a whole number >= 1
    """

    plan: Plan | None = None
    flops_per_step: float | None = None
    tokens_per_sample: int | None = None
    warmup: int = 3
    window: int = 50
    sample_gpu: bool = True
    calibrate: bool = False
    # samples/s once built: a report or a path is read here, once
    single_device: Any = None

    def __post_init__(self) -> None:
        if self.plan is not None and not isinstance(self.plan, Plan):
            raise TypeError(f"plan={self.plan!r}: expected an accelkit Plan or None")
        arguments.positive("flops_per_step", self.flops_per_step, none="counting them")
        arguments.whole("tokens_per_sample", self.tokens_per_sample, 1, none="finding them")
        arguments.whole("warmup", self.warmup, 0)
        arguments.whole("window", self.window, 1)
        for name in ("sample_gpu", "calibrate"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name}={getattr(self, name)!r}: expected True or False")
        rate = world.single_device_rate(self.single_device)
        object.__setattr__(self, "single_device", rate)

    @classmethod
    def of(cls, options: Mapping[str, Any], **defaults: Any) -> MeterOptions:
        """Options from a door's ``**options``; `defaults` are the door's own (used
        where the caller gave none).

        Raises:
            TypeError: an unknown option, naming the valid ones.
        """
        names = [field.name for field in dataclasses.fields(cls)]
        unknown = sorted(set(options) - set(names))
        if unknown:
            raise TypeError(
                f"unknown measurement option(s) {', '.join(unknown)}: "
                f"valid ones are {', '.join(names)}"
            )
        return cls(**{**defaults, **options})

    def to_kwargs(self, **changes: Any) -> dict[str, Any]:
        """The options as a door's ``**options`` (with `changes`), to hand them on."""
        return {**{f.name: getattr(self, f.name) for f in dataclasses.fields(self)}, **changes}
