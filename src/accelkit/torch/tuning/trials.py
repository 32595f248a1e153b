"""What `tune` measures: its candidates' trials, its result, and the limits it keeps.

The plan says what a datasheet implies; how much ``torch.compile`` or a fused
optimizer gives depends on the model (on one H200, docs/benchmarks.md: 2.29x the
eager fit for a Hugging Face GPT-2, 1.46x for ResNet-50 at batch 256, nothing for
ResNet-50 at batch 64, where compile measured slower). So the first
steps of a run try the options, one after another, and the run goes on with the
fastest that computes the same thing:

1. the plan's settings as they are (the baseline: eager, or compiled when the
   script or plan fixed ``compile=True``);
2. the optimizer's fused (or foreach) implementation, switched in place, when the
   script left that choice to PyTorch (`accelkit.torch.tuning.optimizers`);
3. under DistributedDataParallel, its options (`accelkit.torch.tuning.levers`): bf16
   gradients under a bf16 plan, larger buckets, a static graph, no buffer broadcast,
   each on top of the best so far;
4. SDPA attention for Hugging Face models that run eager attention and support SDPA
   (`accelkit.torch.tuning.attention`), switched in place, checked like compile;
5. ``torch.compile`` of forward and loss, with the better optimizer (and attention),
   when the script did not fix ``compile``;
6. on a CUDA device without DDP, the same compiled into CUDA graphs
   (``mode="reduce-overhead"``, `accelkit.torch.tuning.graphs`): one launch per graph
   for a step of short kernels;
7. on a CUDA device, where compile was kept and the run left is long enough to pay for
   it (`autotune_unpaid`), ``mode="max-autotune"`` (its CUDA graphs only where those
   were kept): the matmuls' kernels chosen by benchmark as it compiles;
8. on a GPU with float8 tensor cores and torchao installed, where the kept step is
   compiled, the large linear layers in float8 (`accelkit.torch.tuning.float8`),
   checked against the bf16 step with float8's own tolerance.

Every trial step is a real training step on the next batch of the loader (no
batch is trained on twice, none is skipped), timed as one optimizer step (a unit) with
the device synchronised at both ends. The baseline runs `WARMUP_UNITS` untimed units
(allocator, cuDNN autotuning), then `BASELINE_UNITS` timed ones: its step time, which
``tune="auto"`` needs (`decide_after`). Each later candidate runs its `WARMUP_UNITS`
untimed (compilation happens there), then `TIMED_UNITS` in paired rounds against the best
so far (`ROUNDS`): the candidate's step and the best's alternate unit by unit, in ABBA
order (candidate, best, best, candidate, twice), the candidate's in-place switches
turned off for the best's units and on again for its own. Two adjacent units ran under
the same load, so each pair gives a ratio, the best's step over the candidate's, that
load on the machine cannot inflate the way it inflates a median timed ten steps
earlier; the ABBA order cancels a steady drift. The candidate's speedup over the best
is the median ratio, its noise the ratios' spread (`pair`); it replaces the best only
when both say faster (`clearly_faster`), and otherwise the best stays, the record
saying ``"undecided: within noise"`` where only the median did (`why_not`). The kept
step's speedup over the baseline is the product of the pairs' medians along the
candidates kept one over another (`TuneResult.speedup`). Compile time is the compiled
candidate's first step less its own median step, reported apart from the step times.

A candidate is dropped, with its reason, when it raises (a compile error, an
out-of-memory error), when compiling breaks the graph more than `GRAPH_BREAK_STORM`
times, or when its first batch computes something else than the eager step on the
same batch and weights: a NaN/inf loss where the eager one was finite, a loss off by
more than ``LOSS_RTOL·|eager|``, or gradients off by more than ``GRAD_RTOL`` of the
eager gradients' norm (with the spread of two random draws allowed on top for a
forward that draws random numbers, such as dropout). Each checked candidate's record
keeps the figures compared and their limits, passed or failed
(`accelkit.profiling.tuning.Check`: ``check`` in ``report.tuning``). The eager reference costs one
forward and backward pass (two with random draws), on a copy of the module
(`accelkit.torch.tuning.reference.copy_of`: the module's own Python state is left to the
run's steps), and leaves no trace: gradients, buffers and random number generators are
put back (`accelkit.torch.tuning.reference`).
The batch it failed on is trained again with the step that works, from zeroed
gradients, so no data is lost (the batches of its optimizer step trained before it
give their gradients again without being counted twice, so an accumulation stays in
phase). The user's own errors raise again there and pass through unchanged.

`accelkit.torch.tuning.engine` runs the trials for every door, in the order of
`accelkit.torch.tuning.registry.LEVERS`; this module holds the numbers that govern them,
each with the reason for its value. Their record, ``report.tuning``, is
`accelkit.profiling.tuning.TuneResult.to_dict()`.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from typing import Any

from accelkit.profiling.tuning import (
    AUTOTUNE_COMPILE_FACTOR,
    AUTOTUNE_SHARE,
    UNKNOWN_LENGTH,
    Trial,
    TuneResult,
    autotune_cost,
    autotune_pays,
    summary,
)

__all__ = [
    "AUTOTUNE_COMPILE_FACTOR",
    "AUTOTUNE_SHARE",
    "Trial",
    "TuneResult",
    "check_mode",
    "clearly_faster",
    "decide_after",
    "decide_before",
    "more_rounds",
    "most_units",
    "pair",
    "summary",
    "turns",
    "why_not",
]

# "auto" tunes when the planned run, at the baseline's measured step time, lasts at
# least this long: compiling a GPT-2-sized model takes about a minute, so the trials
# cost under 10% of any run "auto" tunes.
AUTO_MIN_RUN_S = 600.0
# ...and never a run shorter than this, whose baseline trial would only lengthen its warm-up.
AUTO_MIN_STEPS = 200
WARMUP_UNITS = 2  # untimed optimizer steps per candidate: allocator, cuDNN autotuning
BASELINE_UNITS = 4  # the baseline's timed units: its step time for tune="auto"
# Who trains each timed unit of a later candidate's trial: adjacent units make a pair (the
# i-th of the candidate's units with the i-th of the best's), in ABBA order, which cancels
# a load that grows or fades steadily across the rounds.
CANDIDATE, BEST = "candidate", "best"
ROUNDS = (CANDIDATE, BEST, BEST, CANDIDATE) * 2
TIMED_UNITS = len(ROUNDS)  # a later candidate's timed units: its own and the best's
PAIRS = TIMED_UNITS // 2
# A candidate replaces the best one only when its median pair ratio (the best's step over
# its own, next to each other) is above 1 + MARGIN AND every one of its PAIRS ratios is
# above 1. The median: repeated medians of one setting differ by 0.1-1% on an H200 for
# GPT-2-sized steps (docs/benchmarks.md). Every pair: a sign test; for two steps that
# are equally fast each pair favours the candidate half the time, all 4 of them 1 time
# in 16, and the median must clear 1% on top. Load that hits some units and not others
# (a shared machine: issue 35's case E15 read fused AdamW, ~1.2x, as 56x from medians
# timed 10 steps apart) slows one side of a pair or two: one that slowed the candidate
# takes its minimum below 1 (undecided: the best stays, the faster-known default), one
# that slowed the best moves one ratio of four, which the median ignores. E15's model on
# one core of a shared 2-core CPU, fused against foreach AdamW (1.2-1.3x back to back):
# pairs within 1.05-1.27x and medians of 1.15-1.20x on a quiet turn, kept; with four busy
# processes on the core for the baseline and the first pair, pairs of 0.46-15.3x and a
# median of 1.20x, undecided (the ratio of medians had said 56x). The price: a burst that
# slows one of the candidate's own units leaves a real gain undecided (seen on that CPU:
# a compiled step of ~2 ms against an eager one of ~22 ms, one pair at 0.21x), and the run
# goes on with the best so far, never slower than what it had measured.
MARGIN = 0.01
# ...so a candidate whose median cleared the margin with one pair of PAIRS at or below 1
# gets the ROUNDS again (`more_rounds`), and is kept if its median over all of them
# clears the margin with that one pair the only one (`clearly_faster`): a single burst is
# read through, as the median reads through one on the best's side. On an H100 the 1B
# Llama's float8 step ran 1.09x the compiled bf16 step, pairs 0.99-1.13x: one of its units
# 10% slower than its others, so a real gain was left undecided (docs/benchmarks.md). For
# two steps equally fast the sign test now passes 1/16 + 4/16 x 1/16 = 5/64 of the time
# (1/16 before), and the median must clear 1% on top.
SLOW_PAIRS_READ_THROUGH = 1
# What a compiled candidate's first batch must agree with (`accelkit.torch.tuning.reference`):
# the eager loss within LOSS_RTOL of itself (bf16 autocast rounds differently in fused
# and eager kernels, by well under 2%), and the eager gradients within GRAD_RTOL of
# their norm (a wrong step - constant logits, a dropped backward - is off by ~100%,
# whatever the loss's scale). No absolute tolerance beyond LOSS_ATOL (a loss of exactly
# 0): an absolute 1e-3 accepted anything for a loss of order 1e-3.
LOSS_RTOL = 2e-2
LOSS_ATOL = 1e-12
# A loss below NEAR_ZERO_LOSS is said to be near zero where a check fails on it: a batch
# learnt by heart (one batch repeated through the trials: a 1B Llama's loss fell to 0.0015
# on an H200, and float8's step differed from bf16's by 77% of it, its rounding), where
# the relative limit reads rounding as a difference. The run is not wrong; its data is.
NEAR_ZERO_LOSS = 1e-2
GRAD_RTOL = 0.1


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """How far a checked candidate's first batch may lie from the eager step's on the same
    batch and weights: its loss within `loss` of the eager loss, its gradients within
    `grads` of the eager gradients' norm (random draws and cuDNN's spread allowed on top,
    `accelkit.torch.tuning.trial_guards`); `source` says where the figures come from.
    A lever that computes in another precision has its own (float8's,
    `accelkit.torch.tuning.float8.TOLERANCE`)."""

    loss: float = LOSS_RTOL
    grads: float = GRAD_RTOL
    source: str = "bf16 autocast rounds differently in fused and eager kernels"


# What compile, CUDA graphs, fused optimizers, SDPA and DDP's levers are checked with.
EXACT_ENOUGH = Tolerance()
# Where the forward draws random numbers (dropout; compiled kernels draw their own):
# the loss may differ by LOSS_NOISE_FACTOR times the spread of two eager draws, or by
# the gradients' relative spread (`accelkit.torch.tuning.reference`: one pair of losses
# tells the spread badly; on the CPU, 0.5-1% of correct dropout steps lay beyond 10x
# it), and the gradients' agreement with the eager draws' shared mean (1 for a
# correct step, 0 for missing gradients) within GRAD_AGREEMENT of 1 (0.3-4.2 seen for
# dropout 0.5 at batch 2, 0.7-1.7 at batch 16, 200 batches each).
LOSS_NOISE_FACTOR = 10.0
GRAD_AGREEMENT = 4.0
# Where cuDNN's choice of algorithms alone moves the eager gradients (a second eager
# pass with the other choice, `accelkit.torch.tuning.reference`: a network of
# convolutions and BatchNorm early in training amplifies its rounding), a candidate past
# GRAD_RTOL may lie up to KERNEL_SPREAD_FACTOR times that spread from the eager
# gradients, its agreement with the two passes within GRAD_AGREEMENT of 1. ResNet-50 at
# batch 64, bf16, on an H200 (benchmarks/check_noise.py): the two choices 34.9% apart at
# step 0 and 1.6% at step 20; torch.compile 117.8% and 3.7% from the eager step (3.4x
# and 2.3x the spread).
KERNEL_SPREAD_FACTOR = 4.0
GRAPH_BREAK_STORM = 16


def turns(baseline: bool) -> tuple[str, ...]:
    """Who trains each unit of a trial, in order: `CANDIDATE` (its warm-up, its own timed
    units) or `BEST` (the best so far's units in its paired rounds). The baseline has
    nothing to be paired with: its units are its own. A later candidate may get `ROUNDS`
    again (`more_rounds`).

    Example:
        >>> turns(baseline=True).count(BEST), turns(baseline=False)[WARMUP_UNITS:]
        (0, ('candidate', 'best', 'best', 'candidate', 'candidate', 'best', 'best', 'candidate'))
    """
    return (CANDIDATE,) * WARMUP_UNITS + ((CANDIDATE,) * BASELINE_UNITS if baseline else ROUNDS)


def most_units(baseline: bool) -> int:
    """The most units a trial takes: `turns`, and for a later candidate `ROUNDS` again.

    Example:
        >>> most_units(baseline=True), most_units(baseline=False)
        (6, 18)
    """
    return len(turns(baseline)) + (0 if baseline else TIMED_UNITS)


def pair(trial: Trial, best: str, own: Sequence[float], bests: Sequence[float]) -> None:
    """Record on `trial` its paired rounds against the trial named `best`: `own`, its
    timed units' seconds, and `bests`, the best's, the i-th of each run next to each other.
    Its speedup is the median of the ratios best / own, its noise their ``[min, max]``.

    Example:
        >>> trial = Trial("eager+fused", {})
        >>> pair(trial, "eager", [1.0, 1.0, 2.0, 1.0], [1.2, 1.3, 2.2, 1.25])
        >>> trial.paired_speedup, trial.paired_spread, trial.step_seconds
        (1.225, [1.1, 1.3], 1.0)
        >>> trial.paired_ratios
        [1.2, 1.3, 1.1, 1.25]
    """
    ratios = [round(b / max(o, 1e-12), 6) for o, b in zip(own, bests, strict=False)]
    trial.step_seconds = statistics.median(own)
    trial.spread = [min(own), max(own)]
    trial.paired_speedup = round(statistics.median(ratios), 6)
    trial.paired_spread = [min(ratios), max(ratios)]
    trial.paired_ratios = ratios
    trial.against = best


def _slow_pairs(trial: Trial) -> int:
    """How many of `trial`'s pairs are at or below 1 (a record without its ratios: 1 where
    its spread reaches 1, else 0)."""
    if trial.paired_ratios:
        return sum(ratio <= 1 for ratio in trial.paired_ratios)
    spread = trial.paired_spread
    return int(spread is not None and spread[0] <= 1)


def _slow_allowed(trial: Trial) -> int:
    """How many slow pairs `clearly_faster` reads through: none in `PAIRS`, and
    `SLOW_PAIRS_READ_THROUGH` once `more_rounds` doubled them."""
    return SLOW_PAIRS_READ_THROUGH if len(trial.paired_ratios or ()) > PAIRS else 0


def more_rounds(trial: Trial) -> bool:
    """Whether `trial`, after its first `PAIRS` pairs, gets `ROUNDS` again: its median
    over ``1 + MARGIN`` and exactly one pair at or below 1 (`MARGIN` says why).

    Example:
        >>> trial = Trial("compile+fused+float8", {})
        >>> pair(trial, "compile+fused", [0.27, 0.296, 0.268, 0.27], [0.29, 0.293, 0.29, 0.30])
        >>> more_rounds(trial), clearly_faster(trial, Trial("compile+fused", {}, "chosen"))
        (True, False)
    """
    median = trial.paired_speedup
    if median is None or len(trial.paired_ratios or ()) != PAIRS:
        return False
    return median > 1 + MARGIN and _slow_pairs(trial) == SLOW_PAIRS_READ_THROUGH


def clearly_faster(trial: Trial, best: Trial) -> bool:
    """Whether `trial`, timed in pairs against `best`, beats it beyond the noise: its
    median ratio above ``1 + MARGIN`` and every pair above 1, or after `more_rounds` all
    but one (`MARGIN` says why).

    Example:
        >>> eager = Trial("eager", {}, "baseline")
        >>> fused = Trial("eager+fused", {}, paired_speedup=1.2, paired_spread=[1.1, 1.4],
        ...               against="eager")
        >>> clearly_faster(fused, eager)
        True
        >>> fused.paired_spread = [0.9, 1.4]   # one pair the other way: within the noise
        >>> clearly_faster(fused, eager)
        False
        >>> pair(fused, "eager", [1.0] * 8, [0.9] + [1.2] * 7)   # ...read through in eight
        >>> clearly_faster(fused, eager)
        True
    """
    median, spread = trial.paired_speedup, trial.paired_spread
    if median is None or not spread or trial.against != best.name:
        return False
    return median > 1 + MARGIN and _slow_pairs(trial) <= _slow_allowed(trial)


def why_not(trial: Trial, best: Trial) -> str:
    """Why `trial` does not replace `best`, with its paired figures.

    Example:
        >>> eager = Trial("eager", {}, "baseline")
        >>> why_not(Trial("eager+fused", {}, paired_speedup=1.2, paired_spread=[0.9, 1.4],
        ...               against="eager"), eager)
        'undecided: within noise (median 1.20x eager, pairs 0.90-1.40x: not all above 1x)'
        >>> trial = Trial("eager+fused", {})
        >>> pair(trial, "eager", [1.0] * 8, [0.9, 0.95] + [1.2] * 6)
        >>> why_not(trial, eager)
        'undecided: within noise (median 1.20x eager, pairs 0.90-1.20x: 2 of 8 not above 1x)'
    """
    median, spread = trial.paired_speedup, trial.paired_spread
    if median is None or not spread:
        return f"not timed against {best.name}"
    figures = f"median {median:.2f}x {best.name}, pairs {spread[0]:.2f}-{spread[1]:.2f}x"
    if median <= 1 + MARGIN:
        return f"not clearly faster than {best.name} ({figures}; needs over {1 + MARGIN:.2f}x)"
    slow, allowed = _slow_pairs(trial), _slow_allowed(trial)
    if slow > allowed:
        count = len(trial.paired_ratios or ())
        said = f"{slow} of {count} not above 1x" if allowed else "not all above 1x"
        return f"undecided: within noise ({figures}: {said})"
    return f"not kept: rank 0 did not measure it clearly faster (here {figures})"


def autotune_unsupported(device: Any, kept: Trial) -> str | None:
    """Why max-autotune is not tried on `device` when `kept` is the best so far, or None."""
    if device.type != "cuda":
        return "max-autotune tunes GPU kernels; this run is on the CPU"
    if not kept.settings.get("compile"):
        return "torch.compile was not kept"
    return None


def autotune_unpaid(
    planned: int | None, done: int, kept: Trial, unit: int, compiled: Trial | None
) -> str | None:
    """Why the run is too short to pay for max-autotune, or None: `planned` training
    steps of which `done` trained, at `kept`'s step time (per optimizer step of `unit`
    batches), against `AUTOTUNE_COMPILE_FACTOR` times the `compiled` trial's compile time.
    A compile that took graphs from inductor's cache prices nothing: the factor is of a
    compile from scratch (on an H100 a 1B Llama's compile read from the cache of a run
    before priced max-autotune at a fraction of its cost, docs/benchmarks.md).

    Example:
        >>> kept = Trial("compile", {"compile": True}, step_seconds=0.1)
        >>> autotune_unpaid(100_000, 50, kept, 1, Trial("compile", {}, compile_seconds=40.0))
        >>> autotune_unpaid(2_000, 50, kept, 1, Trial("compile", {}, compile_seconds=40.0))
        "the run's 195 s left would not pay back max-autotune's compilation (about 480 s)"
        >>> cached = Trial("compile", {}, compile_seconds=4.0, compile_cached=True)
        >>> autotune_unpaid(100_000, 50, kept, 1, cached)[:53]
        "the default compile took graphs from inductor's cache"
    """
    if planned is None:
        return f"{UNKNOWN_LENGTH} (no steps= and no len(loader))"
    if compiled is None or compiled.compile_seconds is None or kept.step_seconds is None:
        return "the default compile's time was not measured"
    if compiled.compile_cached:
        return (
            f"the default compile took graphs from inductor's cache ({compiled.compile_seconds:.0f}"
            " s), so max-autotune's compilation, about "
            f"{AUTOTUNE_COMPILE_FACTOR:.0f}x one from scratch, cannot be priced from it"
        )
    left = max(planned - done, 0) * kept.step_seconds / unit
    cost = autotune_cost(compiled.compile_seconds)
    if not autotune_pays(left, compiled.compile_seconds):
        return (
            f"the run's {left:.0f} s left would not pay back max-autotune's compilation "
            f"(about {cost:.0f} s)"
        )
    return None


def best_so_far(tried: list[Trial]) -> Trial:
    """The last of `tried` that is the baseline or was chosen: what a candidate must beat."""
    return next(t for t in reversed(tried) if t.status in ("baseline", "chosen"))


def overtake(trial: Trial, best: Trial) -> None:
    """Record `trial` as chosen over `best`; a `best` that had been chosen keeps its figure
    and says what overtook it.

    Example:
        >>> eager = Trial("eager", {}, "baseline")
        >>> fused = Trial("eager+fused", {}, paired_speedup=1.2, paired_spread=[1.1, 1.4],
        ...               against="eager")
        >>> overtake(fused, eager)
        >>> fused.status, fused.why
        ('chosen', '1.20x eager (pairs 1.10-1.40x)')
    """
    spread = trial.paired_spread
    timed = trial.paired_speedup is not None and spread and trial.against == best.name
    ratio = f"{trial.paired_speedup:.2f}x" if timed else "?x"  # ?: rank 0's verdict only
    if best.status == "chosen":
        best.status = "slower"
        best.why = f"{best.why}; overtaken by {trial.name} ({ratio} it)"
    trial.status = "chosen"
    trial.why = f"{ratio} {best.name}"
    if timed and spread:
        trial.why += f" (pairs {spread[0]:.2f}-{spread[1]:.2f}x)"


def decide_before(mode: Any, torch: Any, device: Any, planned: int | None) -> str:
    """ "tuned", or why not, where no measurement is needed to tell: `mode` True always
    tunes; ``"auto"`` tunes a GPU run of at least `AUTO_MIN_STEPS` `planned` training
    steps that did not ask for deterministic algorithms."""
    if mode is True:
        return "tuned"
    if torch.are_deterministic_algorithms_enabled() or torch.backends.cudnn.deterministic:
        # A reproducible run keeps the kernels it asked for; compiled kernels differ.
        return "not tuned: the script asked for deterministic algorithms (tune=True tunes)"
    if device.type != "cuda":
        return "not tuned: tune='auto' tunes GPU runs (tune=True tunes this one)"
    if planned is None:
        return "not tuned: the run's length is unknown (no steps= and no len(loader))"
    if planned < AUTO_MIN_STEPS:
        return (
            f"not tuned: {planned} steps are fewer than the "
            f"{AUTO_MIN_STEPS} it takes to pay back a compilation"
        )
    return "tuned"


def decide_after(mode: Any, step_seconds: float, planned: int | None) -> str:
    """ "tuned", or why not, once the baseline's time per training step is known:
    ``"auto"`` goes on when the planned run lasts at least `AUTO_MIN_RUN_S`.

    Example:
        >>> decide_after("auto", 0.05, 1000)  # doctest: +ELLIPSIS
        'not tuned: the run is estimated at 50 s (1000 steps x 50.0 ms), under the 600 s...'
    """
    if mode is True:
        return "tuned"
    estimate = step_seconds * (planned or 0)
    if estimate < AUTO_MIN_RUN_S:
        return (
            f"not tuned: the run is estimated at {estimate:.0f} s ({planned} "
            f"steps x {step_seconds * 1e3:.1f} ms), under the {AUTO_MIN_RUN_S:.0f} s "
            "that pays back the trials"
        )
    return "tuned"


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
