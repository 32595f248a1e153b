"""Each step's FLOPs follow its batch's shapes (`accelkit.profiling.flops_shapes`): the
doors that count (`Meter`, `accelkit.torch.fit`), the length fit, the per-sample check,
the counting budget, and the clock's sums. Independent counts are
`count_train_step_flops` on each batch whole."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import accelkit
from accelkit.profiling import flops_shapes
from accelkit.profiling.clock import StepClock
from accelkit.profiling.flop_count import FlopCount, StepFlops
from accelkit.profiling.flops_shapes import ShapeFlops, _LengthFit
from accelkit.profiling.flops_torch import count_train_step_flops
from accelkit.torch.measuring.meter import Meter

from ..helpers.transformers_models import gpt2

VOCAB = 500


def _batch(length: int, size: int = 8, seed: int = 0) -> dict[str, torch.Tensor]:
    ids = torch.randint(1, VOCAB, (size, length), generator=torch.Generator().manual_seed(seed))
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}


def _metered(model, batches, *, window: int = 1, step=None):
    """A `Meter` loop over `batches`, window by window; the report and each steady
    window's own FLOPs (window=1: each steady step's)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    meter = Meter(model, warmup=1, window=window, sample_gpu=False)
    windows = []
    with meter:
        for batch in batches:
            with meter.step(batch):
                (step or (lambda b: model(**b).loss))(batch).backward()
                optimizer.step()
                optimizer.zero_grad()
            taken = meter.recorder.clock.take()
            if taken.steps:
                windows.append(taken.flops.model if taken.flops is not None else None)
    return meter.report(), windows


def test_a_meter_loop_whose_first_batch_is_short_counts_every_long_step_as_long():
    """The issue's case: GPT-2, a first batch of (8, 16) token ids and twelve of (8, 256):
    the count of the first batch stood for all of them (22x low)."""
    model = gpt2(vocab=VOCAB, context=256)
    batches = [_batch(16)] + [_batch(256, seed=i) for i in range(12)]
    report, windows = _metered(model, batches)
    long = count_train_step_flops(model, batches[1]).total
    assert long > 20 * count_train_step_flops(model, batches[0]).total
    assert len(windows) == 12
    for flops in windows:
        assert flops == pytest.approx(long, rel=0.02)
    assert report.flops_per_step == pytest.approx(long, rel=0.02)
    assert "its own batches' shapes" in report.notes["flops_per_step"]


def test_each_step_of_mixed_lengths_has_its_own_count_and_the_run_their_mean():
    model = gpt2(vocab=VOCAB, context=128)
    lengths = [32, 16, 128, 16, 64, 128, 8, 32, 100, 16]
    batches = [_batch(n, seed=i) for i, n in enumerate(lengths)]
    report, windows = _metered(model, batches)
    counts = [count_train_step_flops(model, b).total for b in batches[1:]]
    assert windows == pytest.approx(counts, rel=0.02)
    assert report.flops_per_step == pytest.approx(sum(counts) / len(counts), rel=0.02)
    assert report.achieved_tflops == pytest.approx(
        sum(counts) / report.steady_seconds / 1e12, rel=0.02
    )


def test_lengths_beyond_the_counted_ones_come_from_the_fit_in_the_sequence_length():
    """Every batch a new length (dynamic padding): after a few counted lengths the rest
    are fitted, exactly, and the note says through which lengths."""
    model = gpt2(vocab=VOCAB, context=128)
    lengths = [20, 24, 40, 56, 72, 88, 104, 120, 12, 36, 60, 96]
    batches = [_batch(n, size=4, seed=i) for i, n in enumerate(lengths)]
    report, windows = _metered(model, batches)
    counts = [count_train_step_flops(model, b).total for b in batches[1:]]
    assert windows == counts  # exact: the fit is exact where the FLOPs are quadratic
    note = report.notes["flops_per_step"]
    assert "fitted in the sequence length" in note
    assert "a quadratic in the sequence length through the counts at" in note


def test_a_step_that_does_more_than_the_models_pass_is_scaled_and_says_so():
    """Two forward passes in the step: the first step's count (inline, what the step did)
    disagrees with one pass of its samples, so later shapes are scaled, not counted."""
    model = gpt2(vocab=VOCAB, context=128)
    batches = [_batch(32)] + [_batch(64, seed=i) for i in range(4)]
    twice = lambda b: model(**b).loss + model(**b).loss  # noqa: E731
    report, windows = _metered(model, batches, step=twice)
    note = report.notes["flops_per_step"]
    assert "scaled from the first step's" in note
    first = 2 * count_train_step_flops(model, batches[0]).total
    assert windows == pytest.approx([first * 2] * 4, rel=1e-9)  # twice the elements


def test_fit_counts_each_shape_of_its_loader():
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    shapes = [(8, 16), (8, 16), (4, 16), (8, 16), (2, 16), (4, 16), (8, 16)]
    loader = [(torch.randn(n, d), torch.randint(0, 4, (n,))) for n, d in shapes]
    report = accelkit.torch.fit(
        model,
        loader,
        torch.optim.SGD(model.parameters(), lr=0.1),
        torch.nn.functional.cross_entropy,
        plan=accelkit.plan_for(None),
        warmup=1,
        window=2,
        sample_gpu=False,
        progress=False,
    )
    counts = [
        count_train_step_flops(model, x, y, torch.nn.functional.cross_entropy).total
        for x, y in loader[1:]
    ]
    assert report.flops_per_step == pytest.approx(sum(counts) / len(counts))


class _StoppedClock:
    """A clock that never moves: every count costs more than the budget allows."""

    elapsed_s = 1e-9

    def apart(self):
        import contextlib

        return contextlib.nullcontext()


def test_counting_stops_at_its_budget_and_the_rest_is_scaled():
    model = torch.nn.Linear(8, 8)
    calls = []

    def count(batch):
        calls.append(tuple(batch.shape))
        return count_train_step_flops(model, batch)

    shapes = ShapeFlops(count, _StoppedClock())
    first = torch.zeros(4, 3, 8)
    shapes.start([first], count_train_step_flops(model, first))
    for rows in range(4, 14):
        shapes.step([torch.zeros(4, rows, 8)])
    # the free counts (the first step's sample among them), then none: the budget is
    # spent (and a 3-d batch of floats has no token length to fit)
    assert len(calls) == flops_shapes.FREE_COUNTS
    scaled = shapes.step([torch.zeros(4, 20, 8)])
    assert scaled is not None
    assert scaled.model == count_train_step_flops(model, torch.zeros(4, 20, 8)).total
    assert "scaled by their elements" in shapes.note()


@settings(max_examples=60, deadline=None)
@given(
    coefficients=st.tuples(*[st.integers(0, 10**6)] * 3),
    lengths=st.lists(st.integers(1, 4096), min_size=4, max_size=8, unique=True),
    cubic=st.integers(0, 3),
)
def test_the_length_fit_is_exact_on_quadratics_and_refuses_anything_else(
    coefficients, lengths, cubic
):
    a, b, c = coefficients

    def count(length: int) -> FlopCount:
        total = a + b * length + c * length**2 + cubic * length**3
        forward = b * length + c * length**2
        return FlopCount(total=total, forward=forward, by_op={"aten.mm": total})

    fit = _LengthFit.through([(n, count(n)) for n in lengths])
    if cubic:
        assert fit is None
    else:
        assert fit is not None
        for n in (1, 7, 300, 10_000):
            assert fit.at(n)["total"] == count(n).total


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(1, 10**12)), min_size=1, max_size=40))
def test_the_clocks_windows_add_the_steps_own_flops_or_none(flops):
    clock = StepClock(None, warmup=0, window=3)
    for n in flops:
        clock.step_done(samples=1, flops=None if n is None else StepFlops(float(n)))
    taken = clock.take(close=True)
    summary = clock.finish()
    if None in flops:
        assert taken.flops is None and summary.steady_flops is None
    else:
        assert taken.flops.model == pytest.approx(sum(flops))
        assert summary.steady_flops.model == pytest.approx(sum(flops))


def test_fixed_shapes_say_nothing_and_count_once():
    model = gpt2(vocab=VOCAB, context=64)
    batches = [_batch(32, seed=i) for i in range(6)]
    report, windows = _metered(model, batches)
    once = count_train_step_flops(model, batches[0]).total
    assert windows == [once] * 5
    assert "own batches' shapes" not in report.notes.get("flops_per_step", "")


def test_lengths_are_told_from_other_dimensions():
    sample, size = flops_shapes.TORCH.read((torch.zeros(8, 16, dtype=torch.long), torch.zeros(8)))
    assert (sample.length, size) == (16, 8)
    images, size = flops_shapes.TORCH.read((torch.zeros(4, 3, 32, 32), torch.zeros(4)))
    assert images.length is None and images.elements == 3 * 32 * 32 + 1
    assert all(d == flops_shapes.BATCH for d in itertools.chain([images.shape[0][0]]))
    assert math.prod(images.shape[0][1:]) == 3 * 32 * 32


def test_a_step_whose_batch_cannot_be_read_leaves_the_first_count_and_says_so():
    model = gpt2(vocab=VOCAB, context=64)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    batches = [_batch(16), _batch(32, seed=1), _batch(64, seed=2)]
    meter = Meter(model, warmup=1, window=1, sample_gpu=False)
    with meter:
        for i, batch in enumerate(batches):
            with meter.step(None if i == 2 else batch, samples=8):
                model(**batch).loss.backward()
                optimizer.step()
                optimizer.zero_grad()
    report = meter.report()
    assert report.flops_per_step == count_train_step_flops(model, batches[0]).total
    assert "1 batch whose shapes could not be read" in report.notes["flops_per_step"]
