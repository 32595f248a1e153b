"""Each training step's FLOPs from its own batch's shapes.

A run's batches need not share a shape: padding to each batch's longest sequence
(`DataCollatorWithPadding`), length-grouped sampling, packed sequences of several
lengths, multi-scale images, a last batch smaller than the others. The first step's
count then says little of the others (a GPT-2 step on (8, 16) token ids has 1/22 of the
FLOPs of one on (8, 256)). `ShapeFlops` gives each step the FLOPs of its own batches:

- **Per sample.** A step's FLOPs are B x those of one of its samples when its count is
  linear in the batch size with nothing that does not grow with it: every counted op
  (matmul, convolution, attention) runs per sample (`accelkit.profiling.flops_sliced`
  relies on the same). That is checked once, when a second shape first appears: the
  first step's count, as the door counted it, must equal the sum over its batches of B
  x a count of one of their samples (kept aside at the first step: "the probes"). Where
  it does not (the step does more than the model's forward and backward on its batch:
  a second model, a penalty; or work on the weights alone), later steps are scaled from
  the first by their elements, and the note says so.
- **Counted.** A per-sample shape seen for the first time is counted on one sample cut
  from its batch: a pass of 1/B of a step's FLOPs (the counter's own overhead per op
  stays), timed apart from the step (`StepClock.apart`).
- **Fitted.** Token batches of one structure whose sequence length varies: a
  transformer's per-sample FLOPs are a polynomial of degree two in the length L (its
  linear layers' L·d², attention's L²·d; Kaplan et al. 2020, table 1). Once four
  lengths are counted, the quadratic through three of them that gives the fourth
  exactly, every figure op by op, gives every other length without a count; a later
  count it misses drops it (sliding-window attention, unpadding kernels).
- **Bounded.** After `FREE_COUNTS`, a new count is taken only while counting has taken
  less than `BUDGET` of the run's time so far, and at most `MAX_SHAPES` shapes are
  counted. A shape neither counted nor fitted is scaled from the counted shape of its
  structure nearest in elements (else the first step's), and the note counts those steps.

Batches are read through the door's framework (`Batches`): `TORCH` here, duck-typed like
`accelkit.profiling.torch_batches`; Keras' in `accelkit.keras.batches`, where Keras is
imported. This module imports neither framework.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from fractions import Fraction
from typing import Any, Protocol

from accelkit.profiling import flops_sliced, torch_batches
from accelkit.profiling.flop_count import FlopCount, StepFlops

BUDGET = 0.01  # counting's largest share of the run's time so far, once FREE_COUNTS are taken
FREE_COUNTS = 4  # counts taken whatever the budget: the points a length fit needs
MAX_SHAPES = 64  # per-sample shapes counted at most
FIRST = "of the first step's shapes"  # steps of the first step's shapes, as the note names them
COUNTED, FITTED = "of counted shapes", "fitted in the sequence length"
SCALED = "scaled by their elements from the nearest counted shape"
SCALED_FROM_FIRST = "scaled by their elements from the first"
BATCH, LENGTH = -1, -2  # a per-sample shape's batch dimension, a structure's sequence length

Shape = tuple[tuple[int, ...], ...]


class Clock(Protocol):
    """What `ShapeFlops` needs of the door's clock (`accelkit.profiling.clock.StepClock`)."""

    @property
    def elapsed_s(self) -> float: ...

    def apart(self) -> contextlib.AbstractContextManager[None]: ...


@dataclasses.dataclass(frozen=True)
class Sample:
    """What one sample of a batch looks like: the key of its per-sample count.

    Attributes:
        shape: every tensor's shape in the batch, in order, its batch dimension `BATCH`.
        structure: `shape` with the token sequence length as `LENGTH` (shapes of one
            structure differ only in their length).
        length: the token sequence length, where the batch holds token ids; else None.
        elements: the elements of one sample, all its tensors together.
    """

    shape: Shape
    structure: Shape
    length: int | None
    elements: int

    @classmethod
    def of(cls, shapes: Sequence[tuple[int, ...]], size: int, length: int | None) -> Sample:
        """The sample of a batch of `size` samples whose tensors have `shapes` (in order)
        and whose token ids have `length` (None: no token ids).

        Example:
            >>> sample = Sample.of([(8, 16), (8, 16), (8,)], 8, 16)
            >>> sample.shape, sample.structure, sample.elements
            (((-1, 16), (-1, 16), (-1,)), ((-1, -2), (-1, -2), (-1,)), 33)
        """
        return _sample(tuple(shapes), size, length)


@functools.lru_cache(maxsize=256)
def _sample(shapes: tuple[tuple[int, ...], ...], size: int, length: int | None) -> Sample:
    """`Sample.of`, kept for the shapes seen: a run's steps mostly repeat a few, and this
    runs on every steady step."""
    shape = tuple((BATCH, *dims[1:]) if dims and dims[0] == size else dims for dims in shapes)
    return Sample(shape, _structure(shape, length), length, _elements(shape))


class Batches(Protocol):
    """How `ShapeFlops` reads a framework's batches: `TORCH` below, Keras' in
    `accelkit.keras.batches.KERAS`."""

    def read(self, batch: Any) -> tuple[Sample, int] | None:
        """The batch's `Sample` and its batch size; None when they cannot be told."""
        ...

    def one_sample(self, batch: Any, size: int) -> Any:
        """The batch with every tensor whose first dimension is `size` cut to its first
        sample: what a per-sample count is taken on."""
        ...

    def copy(self, batch: Any) -> Any:
        """The batch with tensors of its own (a probe kept past the loader's next batch)."""
        ...


class TorchBatches:
    """PyTorch's batches, as `accelkit.profiling.torch_batches` reads them (duck-typed:
    no torch import): tensors in tuples, lists and mappings, the batch size and the token
    ids found as every door finds them.

    Example:
        >>> import torch
        >>> ids = torch.zeros(8, 16, dtype=torch.long)
        >>> sample, size = TORCH.read({"input_ids": ids, "labels": ids})
        >>> sample.shape, sample.structure, sample.length, sample.elements, size
        (((-1, 16), (-1, 16)), ((-1, -2), (-1, -2)), 16, 32, 8)
        >>> TORCH.one_sample({"input_ids": ids, "labels": ids}, 8)["input_ids"].shape
        torch.Size([1, 16])
    """

    def read(self, batch: Any) -> tuple[Sample, int] | None:
        size, ids = torch_batches.sizes(batch)
        shapes = [tuple(map(int, tensor.shape)) for tensor in _tensors(batch)]
        if not size or not shapes:
            return None
        length = int(ids.shape[1]) if ids is not None and ids.dim() == 2 else None
        return Sample.of(shapes, size, length), size

    def one_sample(self, batch: Any, size: int) -> Any:
        return flops_sliced.head(batch, 1, size)[0]

    def copy(self, batch: Any) -> Any:
        return _copied(batch)


TORCH = TorchBatches()


class ShapeFlops:
    """One run's FLOPs per step, from each step's batches (the module docstring).

    Args:
        count: counts one training step's FLOPs on a batch as the model takes it
            (`count_train_step_flops` with the door's loss and autocast); called on
            batches of one sample.
        clock: the door's clock, which times the counts apart from the steps.
        batches: how the door's batches are read and cut (`Batches`): `TORCH`, or
            `accelkit.keras.batches.KERAS`.

    Example:
        >>> import torch
        >>> from accelkit.profiling.clock import StepClock
        >>> from accelkit.profiling.flops_torch import count_train_step_flops
        >>> model = torch.nn.Linear(16, 16)
        >>> shapes = ShapeFlops(lambda x: count_train_step_flops(model, x), StepClock(None))
        >>> first = torch.zeros(4, 3, 16)
        >>> shapes.start([first], count_train_step_flops(model, first))
        >>> shapes.step([torch.zeros(4, 5, 16)]).model == count_train_step_flops(
        ...     model, torch.zeros(4, 5, 16)).total
        True
    """

    def __init__(
        self, count: Callable[[Any], FlopCount], clock: Clock, *, batches: Batches = TORCH
    ) -> None:
        self._count = count
        self._clock = clock
        self._batches = batches
        self._reset()

    def _reset(self) -> None:
        self._first: tuple[tuple[Sample, int], ...] | None = None
        self._first_flops: StepFlops | None = None
        self._first_count: FlopCount | None = None  # the first step's, as counted
        self._probes: list[tuple[Sample, int, Any]] = []
        self._checked = False
        self._scaled_why: str | None = None  # why the per-sample check failed
        self._counted: dict[Shape, FlopCount] = {}
        self._fits: dict[Shape, _LengthFit | None] = {}  # None: tried, and it missed
        self._spent_s = self._last_s = 0.0
        self._counts = 0
        self._steps: collections.Counter[str] = collections.Counter()
        self._unread = 0  # batches whose shapes could not be read: no step figure

    def start(self, batches: Sequence[Any], count: FlopCount) -> None:
        """The first step's batches and its count (as the door counted it): the reference,
        given to every step of the same shapes; one sample of each batch is kept aside
        (a copy) for the per-sample check."""
        self._reset()  # a recount (the kept float8 step's): everything afresh
        keys = [self._batches.read(batch) for batch in batches]
        if count.total is None or not keys or any(key is None for key in keys):
            return
        found = [key for key in keys if key is not None]
        self._first, self._first_flops = tuple(found), StepFlops.of(count)
        self._first_count = count
        self._probes = [
            (sample, size, self._batches.copy(self._batches.one_sample(batch, size)))
            for (sample, size), batch in zip(found, batches, strict=True)
        ]

    def step(self, batches: Sequence[Any]) -> StepFlops | None:
        """The FLOPs of a step that trained `batches`; None where they cannot be told (no
        reference, or a batch whose shape cannot be read): the run's one count then."""
        if self._first is None or self._first_flops is None:
            return None
        keys = [self._batches.read(batch) for batch in batches]
        if tuple(keys) == self._first:
            self._steps[FIRST] += len(batches)
            return self._first_flops
        if any(key is None for key in keys):
            self._unread += len(batches)
            return None
        found = [key for key in keys if key is not None]
        if not self._checked:
            self._check()
        if self._scaled_why is not None:
            self._steps[SCALED_FROM_FIRST] += len(batches)
            first = sum(size * sample.elements for sample, size in self._first)
            return self._first_flops.times(sum(s * k.elements for k, s in found) / first)
        total = StepFlops(0.0, 0.0, 0.0)
        for (sample, size), batch in zip(found, batches, strict=True):
            total = total + self._one(sample, size, batch).times(size)
        return total

    def note(self) -> str | None:
        """How the steps' FLOPs were had, for the report; None where every step had the
        first step's shapes.

        Example: "each step's FLOPs from its own batches' shapes: 5 shapes counted on one
        sample each; a quadratic in the sequence length through the counts at 16, 256, 64
        (exact at 32, op by op); 1 batch of the first step's shapes, 7 batches of counted
        shapes, 40 batches fitted in the sequence length; counting took 0.41 s (0.2% of
        the run)".
        """
        if self._first is None or not set(self._steps) - {FIRST}:
            return None
        if self._unread:
            batches = "1 batch" if self._unread == 1 else f"{self._unread} batches"
            return (
                f"the first step's count stands for every step: {batches} whose shapes "
                "could not be read had no count of their own"
            )
        if self._scaled_why is not None:
            how = f"each step's FLOPs scaled from the first step's: {self._scaled_why}"
        else:
            how = (
                f"each step's FLOPs from its own batches' shapes: {len(self._counted)} "
                "shapes counted on one sample each"
            )
        fits = [f"; {fit}" for fit in self._fits.values() if fit is not None]
        batches = ", ".join(
            f"{n} {'batch' if n == 1 else 'batches'} {kind}" for kind, n in self._steps.items()
        )
        elapsed = self._clock.elapsed_s
        share = f" ({self._spent_s / elapsed:.2%} of the run)" if elapsed > 0 else ""
        return f"{how}{''.join(fits)}; {batches}; counting took {self._spent_s:.3g} s{share}"

    # -- inside ------------------------------------------------------------------------

    def _check(self) -> None:
        """The per-sample check on the first step (the module docstring)."""
        self._checked = True
        probes, self._probes = self._probes, []  # their memory goes back
        summed: list[int | None] = [0, 0]  # model and hardware FLOPs, in whole numbers
        for sample, size, probe in probes:
            count = self._timed(probe)
            if count is None or count.total is None:
                why = count.notes[-1] if count is not None and count.notes else "it raised"
                self._scaled_why = f"one sample of the first step could not be counted ({why})"
                return
            self._counted[sample.shape] = count
            for i, figure in enumerate((count.total, count.hardware)):
                held = summed[i]
                summed[i] = None if held is None or figure is None else held + size * figure
        first = self._first_count
        if first is not None and summed != [first.total, first.hardware]:
            self._scaled_why = (
                f"the first step counted {first.total:.4g} FLOPs where its samples, counted "
                f"one by one, give {summed[0] or 0:.4g}: the step does more than the model's "
                "forward and backward on its batch, or work that does not grow with it; "
                "the other shapes are scaled by their elements"
            )

    def _one(self, sample: Sample, size: int, batch: Any) -> StepFlops:
        """One sample's FLOPs for `sample`: counted, fitted, counted now, or scaled."""
        if (count := self._counted.get(sample.shape)) is not None:
            self._steps[COUNTED] += 1
            return StepFlops.of(count)
        fit = self._fits.get(sample.structure)
        fitted = fit.at(sample.length) if fit is not None and sample.length else None
        if fitted is not None:
            self._steps[FITTED] += 1
            return StepFlops.of(_count_of(fitted))
        if self._may_count():
            count = self._timed(self._batches.one_sample(batch, size))
            if count is not None and count.total is not None:
                self._record(sample, count)
                self._steps[COUNTED] += 1
                return StepFlops.of(count)
        self._steps[SCALED] += 1
        return self._nearest(sample)

    def _may_count(self) -> bool:
        if self._counts < FREE_COUNTS:
            return True
        if len(self._counted) >= MAX_SHAPES:
            return False
        return self._spent_s + self._last_s <= BUDGET * self._clock.elapsed_s

    def _timed(self, batch: Any) -> FlopCount | None:
        began = time.perf_counter()
        with self._clock.apart():
            try:
                count = self._count(batch)
            except Exception:  # noqa: BLE001 - counting never breaks training
                count = None
        self._last_s = time.perf_counter() - began
        self._spent_s += self._last_s
        self._counts += 1
        return count

    def _record(self, sample: Sample, count: FlopCount) -> None:
        """A new count: kept, checked against the length fit, and a fit tried."""
        self._counted[sample.shape] = count
        if sample.length is None:
            return
        structure = sample.structure
        fit = self._fits.get(structure)
        if fit is not None and fit.at(sample.length) != _figures(count):
            self._fits[structure] = None  # missed a count: dropped for good
        elif structure not in self._fits:
            points = [
                (key.length, found)
                for shape, found in self._counted.items()
                if (key := _key_of(shape, structure)) is not None
            ]
            if len(points) >= _LengthFit.POINTS + 1:
                self._fits[structure] = _LengthFit.through(points)

    def _nearest(self, sample: Sample) -> StepFlops:
        """One sample's FLOPs scaled by elements from the counted shape nearest to it (of
        its structure where there is one), else from the first step."""
        counted = [
            (shape, count)
            for shape, count in self._counted.items()
            if count.total is not None and _structure(shape, sample.length) == sample.structure
        ]
        if counted:
            shape, count = min(counted, key=lambda item: abs(_elements(item[0]) - sample.elements))
            return StepFlops.of(count).times(sample.elements / _elements(shape))
        first = self._first_flops
        assert first is not None and self._first is not None
        elements = sum(size * key.elements for key, size in self._first)
        return first.times(sample.elements / elements)


@dataclasses.dataclass(frozen=True)
class _LengthFit:
    """A quadratic in the sequence length through three one-sample counts, figure by
    figure (exact rationals: Lagrange's form), checked on every other count given."""

    POINTS = 3
    points: tuple[tuple[int, dict[str, int | None]], ...]
    checked: tuple[int, ...]

    @classmethod
    def through(cls, counts: Sequence[tuple[int | None, FlopCount]]) -> _LengthFit | None:
        """The fit through the first three counts that gives every other exactly; None
        where one misses (the FLOPs are not quadratic in the length)."""
        points = [(length, _figures(count)) for length, count in counts if length is not None]
        fit = cls(tuple(points[: cls.POINTS]), tuple(length for length, _ in points[cls.POINTS :]))
        if any(fit.at(length) != figures for length, figures in points[cls.POINTS :]):
            return None
        return fit

    def at(self, length: int) -> dict[str, int | None] | None:
        """Every figure at `length`; None where one is not a whole number >= 0."""
        names = set().union(*(figures for _, figures in self.points))
        found: dict[str, int | None] = {}
        for name in names:
            ys = [figures.get(name, 0) for _, figures in self.points]
            if any(y is None for y in ys):
                found[name] = None
                continue
            value = _lagrange([(x, y) for (x, _), y in zip(self.points, ys, strict=True)], length)
            if value.denominator != 1 or value < 0:
                return None
            found[name] = int(value)
        return found

    def __str__(self) -> str:
        lengths = ", ".join(str(length) for length, _ in self.points)
        checked = ", ".join(map(str, self.checked))
        return (
            f"a quadratic in the sequence length through the counts at {lengths} "
            f"(exact at {checked}, op by op)"
        )


def _lagrange(points: Sequence[tuple[int, int | None]], x: int) -> Fraction:
    """The polynomial through `points` at `x`, in exact rationals."""
    total = Fraction(0)
    for i, (xi, yi) in enumerate(points):
        term = Fraction(yi or 0)
        for j, (xj, _) in enumerate(points):
            if j != i:
                term *= Fraction(x - xj, xi - xj)
        total += term
    return total


def _figures(count: FlopCount | dict[str, int | None]) -> dict[str, int | None]:
    """A count's figures by name, op by op (zero counts left out), for comparisons."""
    if isinstance(count, dict):
        return count
    ops = {op: n for op, n in count.by_op.items() if n}
    return {"total": count.total, "forward": count.forward, "recomputed": count.recomputed, **ops}


def _count_of(figures: dict[str, int | None]) -> FlopCount:
    """The `FlopCount` of `_figures`."""
    named = {"total", "forward", "recomputed"}
    ops = {op: n for op, n in figures.items() if op not in named and n}
    return FlopCount(figures["total"], figures["forward"], ops, recomputed=figures["recomputed"])


def _key_of(shape: Shape, structure: Shape) -> Sample | None:
    """`shape` as a `Sample` of `structure`, with its length; None if not of it."""
    for length in {d for dims in shape for d in dims[1:]}:
        if _structure(shape, length) == structure:
            return Sample(shape, structure, length, _elements(shape))
    return None


def _structure(shape: Shape, length: int | None) -> Shape:
    if length is None:
        return shape
    return tuple(
        tuple(LENGTH if axis and d == length else d for axis, d in enumerate(dims))
        for dims in shape
    )


def _elements(shape: Shape) -> int:
    return sum(math.prod(d for d in dims if d != BATCH) for dims in shape)


def _tensors(value: Any) -> Iterator[Any]:
    """A PyTorch batch's tensors, depth-first."""
    if torch_batches.is_tensor(value):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _tensors(item)
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors(item)


def _copied(value: Any) -> Any:
    """A PyTorch batch with each tensor a copy of its own (detached): what the probe keeps."""
    if torch_batches.is_tensor(value):
        return value.detach().clone()
    if isinstance(value, Mapping):
        return {key: _copied(item) for key, item in value.items()}
    if isinstance(value, (tuple, list)):
        made = [_copied(item) for item in value]
        return type(value)(*made) if hasattr(value, "_fields") else type(value)(made)
    return value
