"""The record of a tuning run (``report.tuning``): its candidates and what was kept.

Plain data, written by `accelkit.torch.tuning.tuner` (``accelkit.torch.fit(tune=...)``) and
read by the advisor's rules (`accelkit.advisor.tuning`): one definition for both.
``TuneResult.to_dict()`` is what a saved report holds; ``from_dict`` reads it back.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any

# max-autotune (`tune`'s candidate, accelkit.torch.tuning.trials.autotune_unpaid, and the
# advisor's max_autotune rule) benchmarks matmul configurations as it compiles: it pays
# when AUTOTUNE_COMPILE_FACTOR times the default compile's time is at most
# AUTOTUNE_SHARE of the run left at the kept step time. The factor is measured: GPT-2
# small, batch 32 x 1024, bf16, on an H200 took 376.7 s to compile with max-autotune
# against 32.0 s by default, 11.8x (benchmarks/results/h200_autotune_gpt2.json). It varies
# with the model: what autotuning adds is its matmul shapes' benchmarking, not the graph
# (+419 s over a 2,275 s default compile of a video model on a GB200,
# hao-ai-lab/FastVideo#1445); each trial records its own compile_seconds.
AUTOTUNE_COMPILE_FACTOR = 12.0
AUTOTUNE_SHARE = 0.1
# How a max-autotune candidate skipped for want of the run's length begins its reason.
UNKNOWN_LENGTH = "the run's length is unknown"
# The reason of a candidate that ran out of device memory in its trial.
OUT_OF_MEMORY = "out of memory"


def autotune_cost(compile_seconds: float) -> float:
    """max-autotune's compile estimated from the default compile's `compile_seconds`."""
    return AUTOTUNE_COMPILE_FACTOR * max(compile_seconds, 1.0)


def autotune_pays(left_seconds: float, compile_seconds: float) -> bool:
    """Whether `left_seconds` of training pay for max-autotune's compile (`autotune_cost`).

    Example:
        >>> autotune_pays(4_800.0, 40.0), autotune_pays(4_799.0, 40.0)
        (True, False)
    """
    return autotune_cost(compile_seconds) <= AUTOTUNE_SHARE * left_seconds


def default_compile(trials: Iterable[Trial]) -> Trial | None:
    """The timed trial of torch.compile in its default mode (no CUDA graphs, no
    max-autotune), whose compile time prices max-autotune's; None when there is none."""
    return next(
        (
            t
            for t in trials
            if t.status != "baseline"
            and t.settings.get("compile")
            and not t.settings.get("cudagraphs")
            and not t.settings.get("compile_mode")
            and t.compile_seconds is not None
        ),
        None,
    )


@dataclasses.dataclass
class Check:
    """How a checked candidate's first batch compared with the eager step on the same
    batch and weights (`accelkit.torch.tuning.trial_guards`): each difference next to the
    most it may be, for a passed candidate too, so a reader sees how close it came.

    Attributes:
        loss_difference: ``|candidate - eager| / |eager|`` of the loss (None: not
            compared: the eager loss was 0 or not finite, or the candidate's not finite).
        loss_limit: the most `loss_difference` may be: ``LOSS_RTOL``, plus what random
            draws (dropout) move the loss, as a share of the eager loss.
        grad_difference: ``|candidate - eager| / |eager|`` of the gradients' sample
            (None: not compared, or compared by `grad_agreement`).
        grad_limit: the most `grad_difference` may be: ``GRAD_RTOL``, or where cuDNN's
            choice of algorithms alone moves the eager gradients further, up to
            ``KERNEL_SPREAD_FACTOR`` times that (`grad_spread`).
        grad_spread: how far the eager step with cuDNN's other choice of algorithms lies
            from the eager one, as a share of the eager gradients' norm (None: not
            measured, no difference, or not consulted: `grad_difference` within
            ``GRAD_RTOL``).
        grad_agreement: with random draws, the gradients' agreement with two eager draws
            instead (1 for the same step, 0 for one without gradients).
        agreement_limit: the factor of 1 `grad_agreement` must lie within
            (``GRAD_AGREEMENT``).
        failed: the check it failed, ``"loss"`` or ``"gradients"``; None: passed.

    Example:
        >>> Check(loss_difference=0.001, loss_limit=0.02, grad_difference=0.114,
        ...       grad_limit=0.1, failed="gradients").describe()
        'loss 0.1% <= 2%, gradients 11.4% > 10%'
    """

    loss_difference: float | None = None
    loss_limit: float | None = None
    grad_difference: float | None = None
    grad_limit: float | None = None
    grad_spread: float | None = None
    grad_agreement: float | None = None
    agreement_limit: float | None = None
    failed: str | None = None

    @property
    def compared(self) -> bool:
        """Whether any figure was compared (a compile error comes before the check)."""
        return (
            any(
                value is not None
                for value in (self.loss_difference, self.grad_difference, self.grad_agreement)
            )
            or self.failed is not None
        )

    def describe(self) -> str:
        """The figures against their limits, in one short line ("-": nothing compared);
        the gradients' figure is a share of the eager gradients' norm."""
        parts = []
        if self.loss_difference is not None and self.loss_limit is not None:
            over = self.failed == "loss"
            parts.append(f"loss {_against(self.loss_difference, self.loss_limit, over)}")
        elif self.failed == "loss":
            parts.append("loss not finite")
        if self.grad_difference is not None and self.grad_limit is not None:
            over = self.failed == "gradients"
            parts.append(f"gradients {_against(self.grad_difference, self.grad_limit, over)}")
            if self.grad_spread is not None:
                parts[-1] += f" (cuDNN's algorithms alone {self.grad_spread * 100:.3g}%)"
        elif self.grad_agreement is not None and self.agreement_limit is not None:
            bound = self.agreement_limit
            parts.append(
                f"gradients' agreement {self.grad_agreement:.3g} "
                f"({'outside' if self.failed == 'gradients' else 'within'} "
                f"{1 / bound:.3g}-{bound:.3g})"
            )
        elif self.failed == "gradients":
            parts.append("gradients not finite")
        return ", ".join(parts) or "-"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Check | None:
        if not isinstance(data, Mapping):
            return None
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in fields})


def _against(share: float, limit: float, over: bool) -> str:
    """``"11.4% > 10%"``: a share against its limit, three significant digits; `over`
    (the check's verdict, not the rounded figures) picks the sign."""
    return f"{share * 100:.3g}% {'>' if over else '<='} {limit * 100:.3g}%"


@dataclasses.dataclass
class Trial:
    """One candidate as measured: its settings, step times and what became of it.

    Attributes:
        name: e.g. ``"eager"``, ``"eager+fused"``, ``"compile+fused"``.
        settings: ``{"compile": bool, "optimizer": "fused" | "foreach" | "default"}``,
            ``"cudagraphs": True`` for the CUDA-graph candidate, ``"compile_mode"`` for
            the max-autotune one (torch.compile's mode), ``"attention": "sdpa"``
            where SDPA attention was on (its trial and those after it kept), and under DDP
            ``"compression"``, ``"bucket_cap_mb"``, ``"static_graph"``, ``"broadcast_buffers"``.
        status: ``"baseline"``, ``"chosen"``, ``"slower"``, ``"failed"`` or ``"skipped"``.
        step_seconds: median of its own timed optimizer steps (None: not timed).
        spread: ``[min, max]`` of its own timed steps.
        steps: training steps (batches) its trial took: its own, and the best's steps
            of its paired rounds.
        compile_seconds: the first compiled step less the steady step time.
        compile_cached: that first step took graphs from inductor's FX graph cache (a run
            before compiled them): its compile_seconds understate a compile from scratch
            (None: not compiled).
        why: the reason for the status, in words (``"undecided: within noise (...)"``
            where its median pair said faster and one of its pairs did not).
        check: how its first batch compared with the eager step (a compiled or
            CUDA-graph candidate; None: not checked, or it failed before the check).
        paired_speedup: how many times faster than the best so far (`against`) it ran:
            the median, over its paired rounds, of the best's step over its own step
            next to it, run under the same load (None: not timed in pairs, as the
            baseline, or one cut short).
        paired_spread: ``[min, max]`` of those ratios: the noise the median stands in.
        paired_ratios: the ratios themselves, pair by pair in the order run (8 where one
            pair of the first 4 was at or below 1 and the rounds were run again).
        against: the name of the trial it was paired with.
    """

    name: str
    settings: dict[str, Any]
    status: str = "skipped"
    step_seconds: float | None = None
    spread: list[float] | None = None
    steps: int = 0
    compile_seconds: float | None = None
    why: str = ""
    check: Check | None = None
    paired_speedup: float | None = None
    paired_spread: list[float] | None = None
    against: str | None = None
    paired_ratios: list[float] | None = None  # new fields last: records built by position
    compile_cached: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Trial:
        """The trial `to_dict` gave; one saved before a field existed gets its default."""
        fields = {f.name for f in dataclasses.fields(cls)}
        found = {k: v for k, v in data.items() if k in fields}
        found["check"] = Check.from_dict(found.get("check"))
        return cls(**found)


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
        ddp: the DDP options kept (``compression``, ``bucket_cap_mb``, ``static_graph``,
            ``broadcast_buffers``; `accelkit.torch.tuning.levers`); empty without DDP.
        attention: ``"sdpa"`` when tune switched the run's Hugging Face models from eager
            attention to SDPA (`accelkit.torch.tuning.attention`); None: left as it was.
        float8: the kept step runs its eligible linear layers' matmuls in float8
            (`accelkit.torch.tuning.float8`).
    """

    decision: str
    trials: tuple[Trial, ...]
    compile: bool
    optimizer: str
    seconds: float
    steps: int
    ddp: dict[str, Any] = dataclasses.field(default_factory=dict)
    attention: str | None = None
    float8: bool = False

    @property
    def baseline(self) -> Trial:
        """The candidate with the plan's settings (the first tried)."""
        return next((t for t in self.trials if t.status == "baseline"), self.trials[0])

    @property
    def chosen(self) -> Trial:
        return next((t for t in self.trials if t.status == "chosen"), self.trials[0])

    @property
    def cudagraphs(self) -> bool:
        """Whether the kept step replays CUDA graphs (``torch.compile(mode="reduce-overhead")``)."""
        return self.decision == "tuned" and bool(self.chosen.settings.get("cudagraphs"))

    @property
    def compile_mode(self) -> str | None:
        """torch.compile's mode of the kept step where not its default (``"max-autotune"``,
        ``"max-autotune-no-cudagraphs"``); None: the default mode, or not compiled."""
        return self.chosen.settings.get("compile_mode") if self.decision == "tuned" else None

    @property
    def speedup(self) -> float | None:
        """How many times faster than the baseline the kept candidate runs: the product
        of the paired speedups along the candidates kept one over another (baseline ->
        the first kept -> the one that overtook it ...); 1.0: the baseline kept; None:
        no baseline timed. A record saved before paired rounds gives the ratio of
        medians it was judged by.

        Example:
            >>> result = TuneResult("tuned", (
            ...     Trial("eager", {}, "baseline", step_seconds=0.4),
            ...     Trial("eager+fused", {}, "slower", paired_speedup=1.25,
            ...           paired_spread=[1.2, 1.3], against="eager"),
            ...     Trial("compile+fused", {}, "chosen", paired_speedup=2.0,
            ...           paired_spread=[1.9, 2.1], against="eager+fused"),
            ... ), True, "fused", 1.0, 26)
            >>> result.speedup, result.speedup_spread
            (2.5, [2.28, 2.73])
        """
        base = self.baseline.step_seconds
        if not base:
            return None
        chain = self._kept_chain()
        if chain is None:
            best = self.chosen.step_seconds
            return round(base / best, 3) if best else None
        return round(math.prod(t.paired_speedup or 1.0 for t in chain), 3)

    @property
    def speedup_spread(self) -> list[float] | None:
        """``[min, max]`` of `speedup`: the products of the kept chain's pair spreads
        (None: the baseline kept, or a record without paired rounds)."""
        chain = self._kept_chain() if self.baseline.step_seconds else None
        if not chain or any(t.paired_spread is None for t in chain):
            return None
        low = math.prod(t.paired_spread[0] for t in chain if t.paired_spread)
        high = math.prod(t.paired_spread[1] for t in chain if t.paired_spread)
        return [round(low, 3), round(high, 3)]

    def speedup_of(self, trial: Trial) -> float | None:
        """How many times faster than the baseline `trial` ran: the product of the paired
        speedups from the baseline to it, each trial against the one it was paired with
        (1.0 for the baseline; None where a link was not timed in pairs, as in a record
        saved before paired rounds).

        Example:
            >>> eager = Trial("eager", {}, "baseline", step_seconds=0.4)
            >>> fused = Trial("eager+fused", {}, "chosen", paired_speedup=1.25, against="eager")
            >>> graphs = Trial("cudagraphs", {}, "slower", paired_speedup=0.5,
            ...                against="eager+fused")
            >>> result = TuneResult("tuned", (eager, fused, graphs), False, "fused", 1.0, 26)
            >>> result.speedup_of(graphs)
            0.625
        """
        chain = self._chain(trial)
        return (
            None if chain is None else round(math.prod(t.paired_speedup or 1.0 for t in chain), 3)
        )

    def _kept_chain(self) -> list[Trial] | None:
        """The trials kept one over another, the first kept over the baseline first and
        the kept one last ([] for the baseline kept); None where a link has no paired
        figure (a record saved before paired rounds)."""
        return self._chain(self.chosen) if self.chosen.status == "chosen" else []

    def _chain(self, link: Trial) -> list[Trial] | None:
        """The trials from the baseline to `link`, each paired with the one before it
        (the baseline left out); None where a link has no paired figure."""
        at = next((i for i, t in enumerate(self.trials) if t is link), None)
        if at is None:
            return None
        earlier = list(self.trials[:at])
        chain: list[Trial] = []
        while link.status != "baseline":
            if link.paired_speedup is None or link.against is None:
                return None
            chain.append(link)
            found = [
                i
                for i, t in enumerate(earlier)
                if t.name == link.against and (t.status == "baseline" or t.paired_speedup)
            ]
            if not found:
                return None
            link, earlier = earlier[found[-1]], earlier[: found[-1]]
        return chain[::-1]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TuneResult:
        """The result `to_dict` gave (``report.tuning``)."""
        trials = tuple(Trial.from_dict(t) for t in data.get("candidates", ()))
        return cls(
            decision=str(data.get("decision", "")),
            trials=trials,
            compile=bool(data.get("compile")),
            optimizer=data.get("optimizer", "default"),
            seconds=float(data.get("seconds", 0.0)),
            steps=int(data.get("steps", 0)),
            ddp=dict(data.get("ddp") or {}),
            attention=data.get("attention"),
            float8=bool(data.get("float8")),
        )

    def to_dict(self) -> dict[str, Any]:
        """The ``report.tuning`` mapping."""
        return {
            "decision": self.decision,
            "baseline": self.baseline.name,
            "chosen": self.chosen.name,
            "speedup": self.speedup,
            "speedup_spread": self.speedup_spread,
            "seconds": round(self.seconds, 3),
            "steps": self.steps,
            "compile": self.compile,
            "cudagraphs": self.cudagraphs,
            "compile_mode": self.compile_mode,
            "optimizer": self.optimizer,
            "ddp": dict(self.ddp),
            "attention": self.attention,
            "float8": self.float8,
            "candidates": [t.to_dict() for t in self.trials],
        }


def summary(result: TuneResult) -> str:
    """One line: what was kept, how much faster (and within what spread of its paired
    rounds), what the trials cost.

    Example:
        >>> summary(TuneResult("tuned", (
        ...     Trial("eager", {}, "baseline", step_seconds=0.4),
        ...     Trial("eager+fused", {}, "chosen", paired_speedup=1.21,
        ...           paired_spread=[1.15, 1.3], against="eager"),
        ... ), False, "fused", 3.14, 16))
        'kept eager+fused (1.21x eager, spread 1.15-1.30x) after 16 steps, 3.1 s'
    """
    if result.decision != "tuned":
        return result.decision
    speedup = f"{result.speedup:.2f}x" if result.speedup else "?"
    spread = result.speedup_spread
    within = f", spread {spread[0]:.2f}-{spread[1]:.2f}x" if spread else ""
    return (
        f"kept {result.chosen.name} ({speedup} {result.baseline.name}{within}) after "
        f"{result.steps} steps, {result.seconds:.1f} s"
    )
