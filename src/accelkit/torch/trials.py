"""What `tune` measures: its candidates' trials, its result, and the limits it keeps.

The plan says what a datasheet implies; how much ``torch.compile`` or a fused
optimizer gives depends on the model (2.3x on a Hugging Face GPT-2 on an H200,
1.45x on ResNet-50, nothing on a model that is all large matmuls). So the first
steps of a run try the options, one after another, and the run goes on with the
fastest that computes the same thing:

1. the plan's settings as they are (the baseline: eager, or compiled when the
   script or plan fixed ``compile=True``);
2. the optimizer's fused (or foreach) implementation, switched in place, when the
   script left that choice to PyTorch (`accelkit.torch.optimizers`);
3. ``torch.compile`` of forward and loss, with the better optimizer, when the
   script did not fix ``compile``.

Every trial step is a real training step on the next batch of the loader (no
batch is trained on twice, none is skipped); each candidate runs `WARMUP_UNITS`
untimed optimizer steps, then `TIMED_UNITS` timed ones, each timed with the device
synchronised at both ends. Compile time is the compiled candidate's first step
less its steady step time, reported apart from the step times.

A candidate is dropped, with its reason, when it raises (a compile error, an
out-of-memory error), when its first loss is NaN/inf where the eager loss on the
same batch and weights was finite, or differs from it by more than
``LOSS_RTOL·|eager| + LOSS_ATOL``, or when compiling breaks the graph more than
`GRAPH_BREAK_STORM` times. The batch it failed on is trained again with the step
that works, from zeroed gradients, so no data is lost. The user's own errors
raise again there and pass through unchanged.

`accelkit.torch.tuner` runs the trials; this module holds the plain data they
produce (``report.tuning`` is `TuneResult.to_dict()`) and the numbers that govern
them, each with the reason for its value.
"""

from __future__ import annotations

import dataclasses
from typing import Any

# "auto" tunes when the planned run, at the baseline's measured step time, lasts at
# least this long: compiling a GPT-2-sized model takes about a minute, so the trials
# cost under 10% of any run "auto" tunes.
AUTO_MIN_RUN_S = 600.0
# ...and never a run shorter than this, whose baseline trial would only lengthen its warm-up.
AUTO_MIN_STEPS = 200
WARMUP_UNITS = 2  # untimed optimizer steps per candidate: allocator, cuDNN autotuning
TIMED_UNITS = 8
# A candidate replaces the best one only when its median step is at least this much
# faster and below the best one's fastest timed step: a gain its repeats' spread cannot
# explain (repeated medians of one setting differ by 0.1-1% on an H200 for GPT-2-sized
# steps, docs/benchmarks.md; small, launch-bound steps spread wider and need the second test).
MARGIN = 0.01
# bf16 autocast rounds differently in fused (compiled) and eager kernels, and dropout
# draws differ between them; a compile that computes something else moves the loss
# by far more than 2%.
LOSS_RTOL = 2e-2
LOSS_ATOL = 1e-3
GRAPH_BREAK_STORM = 16
CANDIDATES = 3  # the baseline, the optimizer's fused implementation, torch.compile


def trial_steps(accumulation_steps: int) -> int:
    """The most training steps the trials take (more only when a failed one is retrained)."""
    return CANDIDATES * (WARMUP_UNITS + TIMED_UNITS) * accumulation_steps


def check_mode(tune: Any) -> Any:
    """`tune` itself, or ValueError naming the valid values.

    Example:
        >>> check_mode("yes")
        Traceback (most recent call last):
        ValueError: tune='yes' is not one of 'auto', True, False
    """
    if isinstance(tune, bool) or tune == "auto":
        return tune
    raise ValueError(f"tune={tune!r} is not one of 'auto', True, False")


@dataclasses.dataclass
class Trial:
    """One candidate as measured: its settings, step times and what became of it.

    Attributes:
        name: e.g. ``"eager"``, ``"eager+fused"``, ``"compile+fused"``.
        settings: ``{"compile": bool, "optimizer": "fused" | "foreach" | "default"}``.
        status: ``"baseline"``, ``"chosen"``, ``"slower"``, ``"failed"`` or ``"skipped"``.
        step_seconds: median of the timed optimizer steps (None: not timed).
        spread: ``[min, max]`` of the timed steps.
        steps: training steps (batches) the candidate trained on.
        compile_seconds: the first compiled step less the steady step time.
        why: the reason for the status, in words.
    """

    name: str
    settings: dict[str, Any]
    status: str = "skipped"
    step_seconds: float | None = None
    spread: list[float] | None = None
    steps: int = 0
    compile_seconds: float | None = None
    why: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class TuneResult:
    """What `tune` measured and kept.

    Attributes:
        decision: ``"tuned"`` or ``"not tuned: <why>"``.
        trials: every candidate, in the order tried.
        compile: whether the kept step is compiled.
        optimizer: the optimizer implementation kept: ``"fused"``, ``"foreach"`` or
            ``"default"`` (the optimizer object itself was switched in place).
        seconds: wall time of all trials, compilation included.
        steps: training steps the trials took (real steps of the run).
    """

    decision: str
    trials: tuple[Trial, ...]
    compile: bool
    optimizer: str
    seconds: float
    steps: int

    @property
    def baseline(self) -> Trial:
        return self.trials[0]

    @property
    def chosen(self) -> Trial:
        return next((t for t in self.trials if t.status == "chosen"), self.trials[0])

    @property
    def speedup(self) -> float | None:
        """The kept candidate's median step against the baseline's (1.0: baseline kept)."""
        base, best = self.baseline.step_seconds, self.chosen.step_seconds
        return round(base / best, 3) if base and best else None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TuneResult:
        """The result `to_dict` gave (``report.tuning``)."""
        fields = {f.name for f in dataclasses.fields(Trial)}
        trials = tuple(Trial(**{k: v for k, v in t.items() if k in fields})
                       for t in data.get("candidates", ()))
        return cls(decision=data["decision"], trials=trials, compile=bool(data["compile"]),
                   optimizer=data.get("optimizer", "default"),
                   seconds=float(data.get("seconds", 0.0)), steps=int(data.get("steps", 0)))

    def to_dict(self) -> dict[str, Any]:
        """The ``report.tuning`` mapping."""
        return {"decision": self.decision, "baseline": self.baseline.name,
                "chosen": self.chosen.name, "speedup": self.speedup,
                "seconds": round(self.seconds, 3), "steps": self.steps,
                "compile": self.compile, "optimizer": self.optimizer,
                "candidates": [t.to_dict() for t in self.trials]}


def summary(result: TuneResult) -> str:
    """One line: what was kept, how much faster, what the trials cost."""
    if result.decision != "tuned":
        return result.decision
    speedup = f"{result.speedup:.2f}x" if result.speedup else "?"
    return (f"kept {result.chosen.name} ({speedup} {result.baseline.name}) after "
            f"{result.steps} steps, {result.seconds:.1f} s")
