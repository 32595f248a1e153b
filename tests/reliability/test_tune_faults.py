"""Fault injection into `tune`: a candidate that computes something else must be dropped,
and the trials must leave the run computing what it computes without them.

The kinds, each with the defect that first showed it (issue 23):

- tiny losses: a wrong compiled step (constant logits, no gradients) caught whatever
  the loss's scale, a correct one kept (D01, Hypothesis over 1e-6..1e3);
- random draws: a dropout model's correct compiled step is not a mismatch (D22);
- accumulation with a failing candidate: the optimizer steps where it would without
  the trial, to the same weights (D02);
- state-changing forwards: a buffer the forward reassigns ends as without tune (D04);
- multi-loss tuples: ``(logits, penalty, loss)`` refused, naming the positions (D03);
- frozen submodules: a BatchNorm the script put in eval mode keeps its statistics (D21).

Compilation goes through a real ``torch.compile`` with the fast ``eager`` backend; the
wrong steps are what a miscompile would compute.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import accelkit

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.torch, pytest.mark.reliability]

from accelkit.torch.tuning import registry

from ..helpers.torch_data import CPU_PLAN

STEPS = registry.trial_steps(1, cuda=False)


@contextlib.contextmanager
def compiled_as(then: Callable[[Any], Any] | None = None) -> Iterator[None]:
    """The tuner's ``torch.compile`` with the ``eager`` backend; `then(loss) -> loss`
    changes what the compiled step returns."""
    real = torch.compile

    def patched(fn: Callable[..., Any], **_: Any) -> Callable[..., Any]:
        compiled = real(fn, backend="eager")
        return compiled if then is None else (lambda batch: then(compiled(batch)))

    torch.compile = patched
    try:
        yield
    finally:
        torch.compile = real
        # Each fit compiles the step's code anew: past dynamo's recompile limit it would
        # run uncompiled (no graph breaks counted) in the tests after these.
        torch._dynamo.reset()


class Classifier(torch.nn.Module):
    """A small MLP; under compilation, with `constant`, its logits are constant (what a
    miscompile that drops the input computes)."""

    def __init__(self, constant: bool = False, dropout: float = 0.0, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.a, self.b = torch.nn.Linear(16, 64), torch.nn.Linear(64, 4)
        self.drop = torch.nn.Dropout(dropout)
        self.constant = constant

    def forward(self, x: Any) -> Any:
        out = self.b(self.drop(torch.relu(self.a(x))))
        if self.constant and torch.compiler.is_compiling():
            return out * 0.0
        return out


def data(n: int = STEPS + 4, batch: int = 16) -> list[tuple[Any, Any]]:
    generator = torch.Generator().manual_seed(1)
    return [
        (
            torch.randn(batch, 16, generator=generator),
            torch.randint(0, 4, (batch,), generator=generator),
        )
        for _ in range(n)
    ]


def compiled_candidate(model: Any, scale: float = 1.0, **kwargs: Any) -> dict[str, Any]:
    # lr / scale: the loss's scale changes the numbers compared, not the training.
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1 / scale)

    def loss_fn(out: Any, y: Any) -> Any:
        return scale * torch.nn.functional.cross_entropy(out, y)

    report = accelkit.torch.fit(
        model, data(), optimizer, loss_fn, plan=CPU_PLAN, progress=False, tune=True, **kwargs
    )
    return next(c for c in report.tuning["candidates"] if c["settings"].get("compile"))


def _no_gradients(loss: Any) -> Any:
    return loss.detach() + 0.0 * loss  # the right loss, gradients of zero


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scale=st.floats(1e-6, 1e3), wrong=st.sampled_from(["constant logits", "no gradients"]))
def test_a_wrong_compiled_step_is_dropped_whatever_the_loss_scale(scale: float, wrong: str) -> None:
    with compiled_as(_no_gradients if wrong == "no gradients" else None):
        candidate = compiled_candidate(Classifier(constant=wrong == "constant logits"), scale)
    assert candidate["status"] == "failed", candidate
    assert "differ" in candidate["why"]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scale=st.floats(1e-6, 1e3))
def test_a_correct_compiled_step_is_kept_whatever_the_loss_scale(scale: float) -> None:
    with compiled_as():
        candidate = compiled_candidate(Classifier(), scale)
    assert candidate["status"] in ("chosen", "slower"), candidate


@pytest.mark.parametrize("seed", range(3))
def test_a_dropout_models_correct_compiled_step_is_not_a_mismatch(seed: int) -> None:
    """Compiled kernels draw their own random numbers: the eager-backend step is made to
    draw others by taking one number from the generator first."""
    real = torch.compile

    def patched(fn: Callable[..., Any], **_: Any) -> Callable[..., Any]:
        compiled = real(fn, backend="eager")
        return lambda batch: (torch.rand(1), compiled(batch))[1]

    torch.compile = patched
    try:
        candidate = compiled_candidate(Classifier(dropout=0.5, seed=seed))
    finally:
        torch.compile = real
        torch._dynamo.reset()
    assert candidate["status"] in ("chosen", "slower"), candidate


def test_a_dropout_models_step_without_gradients_is_still_dropped() -> None:
    with compiled_as(_no_gradients):
        candidate = compiled_candidate(Classifier(dropout=0.5))
    assert candidate["status"] == "failed" and "gradients" in candidate["why"], candidate


# -- accumulation with a failing candidate ------------------------------------------------


class SparseBag(torch.nn.Module):
    """A sparse embedding: fused SGD refuses its gradients at the optimizer step."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embedding = torch.nn.Embedding(100, 8, sparse=True)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, ids: Any) -> Any:
        return self.head(self.embedding(ids).mean(1))


def test_a_candidate_failing_under_accumulation_keeps_the_optimizer_steps_in_phase() -> None:
    generator = torch.Generator().manual_seed(3)
    batches = [
        (
            torch.randint(0, 100, (16, 5), generator=generator),
            torch.randint(0, 4, (16,), generator=generator),
        )
        for _ in range(64)
    ]
    runs = {}
    for tune in (True, False):
        model = SparseBag()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        stepped: list[int] = []
        optimizer.register_step_post_hook(lambda *_, seen=stepped: seen.append(1))
        report = accelkit.torch.fit(
            model,
            batches,
            optimizer,
            torch.nn.CrossEntropyLoss(),
            plan=CPU_PLAN,
            accumulation_steps=4,
            tune=tune,
            compile=False,
            progress=False,
        )
        runs[tune] = (len(stepped), report.steps, model.head.weight.detach().clone(), report)
    fused = next(c for c in runs[True][3].tuning["candidates"] if c["name"] == "eager+fused")
    assert fused["status"] == "failed"  # the case under test
    assert runs[True][:2] == runs[False][:2] == (16, 64)
    assert torch.equal(runs[True][2], runs[False][2])


# -- state-changing forwards --------------------------------------------------------------


class Counting(torch.nn.Module):
    """Counts its forward passes in a buffer it reassigns (as an EMA written x = a*x + b)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(16, 4)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x: Any) -> Any:
        self.calls = self.calls + 1
        return self.layer(x)


@pytest.mark.parametrize("dropout", [False, True])
def test_the_compile_check_leaves_a_reassigned_buffer_as_without_tune(dropout: bool) -> None:
    counts = {}
    for tune in (True, False):
        model = Counting()
        if dropout:  # two eager draws for the reference: neither leaves a trace
            model.layer = torch.nn.Sequential(torch.nn.Dropout(0.1), model.layer)
        with compiled_as():
            accelkit.torch.fit(
                model,
                data(),
                torch.optim.SGD(model.parameters(), lr=0.1),
                torch.nn.CrossEntropyLoss(),
                plan=CPU_PLAN,
                tune=tune,
                progress=False,
            )
        counts[tune] = float(model.calls)
    assert counts[True] == counts[False]


# -- multi-loss tuples ---------------------------------------------------------------------


class WithPenalty(torch.nn.Module):
    def __init__(self, named: bool) -> None:
        super().__init__()
        self.layer, self.named = torch.nn.Linear(16, 4), named

    def forward(self, x: Any, y: Any) -> Any:
        out = self.layer(x)
        penalty = 1e-3 * self.layer.weight.pow(2).sum()
        loss = torch.nn.functional.cross_entropy(out, y) + penalty
        return (
            {"logits": out, "penalty": penalty, "loss": loss}
            if self.named
            else (out, penalty, loss)
        )


def test_a_tuple_with_several_scalars_is_refused_naming_them_and_a_named_loss_trains() -> None:
    model = WithPenalty(named=False)
    with pytest.raises(ValueError, match=r"0-d tensors at positions 1, 2") as raised:
        accelkit.torch.fit(
            model,
            data(4),
            torch.optim.SGD(model.parameters(), lr=0.1),
            None,
            plan=CPU_PLAN,
            tune=False,
            progress=False,
        )
    assert "'loss'" in str(raised.value) and "loss_fn" in str(raised.value)
    named = WithPenalty(named=True)
    report = accelkit.torch.fit(
        named,
        data(8),
        torch.optim.SGD(named.parameters(), lr=0.1),
        None,
        plan=CPU_PLAN,
        tune=False,
        progress=False,
    )
    assert report.losses[0] > 1.0  # the cross-entropy, not the 1e-3 penalty


# -- frozen submodules ---------------------------------------------------------------------


def test_a_submodule_frozen_in_eval_mode_keeps_its_mode_and_statistics() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.BatchNorm1d(32), torch.nn.ReLU(), torch.nn.Linear(32, 4)
    )
    model[1].eval()
    model[1].requires_grad_(False)
    before = model[1].running_mean.clone()
    trainable = [p for p in model.parameters() if p.requires_grad]
    report = accelkit.torch.fit(
        model,
        data(8),
        torch.optim.SGD(trainable, lr=0.1),
        torch.nn.CrossEntropyLoss(),
        plan=CPU_PLAN,
        tune=False,
        progress=False,
    )
    assert not model[1].training and model.training and model[0].training
    assert torch.equal(model[1].running_mean, before)
    assert "1 (BatchNorm1d)" in " ".join(report.facts["model_changes"])


def test_a_model_left_in_eval_mode_as_a_whole_trains_in_training_mode() -> None:
    model = Classifier(dropout=0.5)
    model.eval()
    report = accelkit.torch.fit(
        model,
        data(4),
        torch.optim.SGD(model.parameters(), lr=0.1),
        torch.nn.CrossEntropyLoss(),
        plan=CPU_PLAN,
        tune=False,
        progress=False,
    )
    assert all(m.training for m in model.modules())
    assert "put in training mode" in " ".join(report.facts["model_changes"])
