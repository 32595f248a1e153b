"""Fault injection into `accelkit.torch.fit`: bad arguments, interrupts at every stage,
errors of the user's own, a full disk. What DESIGN.md promises ("Never break a
training run"), checked case by case on real fits:

- a bad argument raises ValueError naming what is valid, before anything trains;
- a KeyboardInterrupt at any stage ends the fit with a partial report;
- the user's own error passes through unchanged;
- in every case the NVML sampler thread has stopped;
- a report is written whole or not at all.
"""

from __future__ import annotations

import errno
import math
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import accelkit

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from ..helpers.torch_data import CPU_PLAN, batches, mlp

NUMERIC = {  # argument -> (smallest valid, None allowed)
    "epochs": (1, False),
    "steps": (1, True),
    "accumulation_steps": (1, False),
    "warmup": (0, False),
    "window": (1, False),
    "tokens_per_sample": (1, True),
    "max_grad_norm": (None, True),
    "flops_per_step": (None, True),
}
ODD_VALUES = st.one_of(
    st.booleans(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-5, 3),
    st.text(max_size=3),
    st.none(),
    st.lists(st.integers(), max_size=2),
)


class Boom(Exception):
    pass


def fit(model: Any = None, data: Any = None, **kwargs: Any) -> accelkit.RunReport:
    model = mlp(256, 32, 8) if model is None else model
    data = batches(8, batch=8) if data is None else data
    kwargs.setdefault("plan", CPU_PLAN)
    kwargs.setdefault("progress", False)
    kwargs.setdefault("tune", False)
    return accelkit.torch.fit(
        model,
        data,
        torch.optim.SGD(model.parameters(), lr=0.01),
        torch.nn.CrossEntropyLoss(),
        **kwargs,
    )


def _valid(name: str, value: Any) -> bool:
    smallest, none_ok = NUMERIC[name]
    if value is None:
        return none_ok
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if smallest is None:  # a finite number > 0
        return math.isfinite(value) and value > 0
    return isinstance(value, int) and value >= smallest


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(NUMERIC)), value=ODD_VALUES)
def test_every_numeric_argument_is_checked_before_training(name: str, value: Any) -> None:
    model = mlp(256, 32, 8)
    before = [p.detach().clone() for p in model.parameters()]
    if _valid(name, value):
        fit(model, **{name: value, **({"steps": 2} if name != "steps" else {})})
        return
    with pytest.raises(ValueError, match=name) as raised:
        fit(model, **{name: value})
    assert "must be" in str(raised.value)  # says what is valid
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


@pytest.mark.parametrize("value", ["yes", 2, None, "true"])
def test_a_bad_tune_value_is_refused_before_training(value: Any) -> None:
    with pytest.raises(ValueError, match="'auto', True, False"):
        fit(tune=value)


# -- interrupts and the user's own errors, at each stage --------------------------------


def _sampler_threads() -> int:
    return sum(1 for t in threading.enumerate() if "nvml" in t.name.lower())


class _Raising(torch.nn.Module):
    """An MLP that raises `error` on its `at`-th forward call."""

    def __init__(self, error: BaseException, at: int) -> None:
        super().__init__()
        self.net, self.error, self.at, self.calls = mlp(256, 32, 8), error, at, 0

    def forward(self, x: Any) -> Any:
        self.calls += 1
        if self.calls == self.at:
            raise self.error
        return self.net(x)


def _loader_raising(error: BaseException, at: int) -> Iterator[Any]:
    for i, batch in enumerate(batches(8, batch=8)):
        if i == at:
            raise error
        yield batch


# Stage -> (the fit's arguments raising `error` there, the steps trained before it).
# The FLOP count runs inside the first step: forward call n is step n's.
STAGES: dict[str, tuple[Callable[[BaseException], dict[str, Any]], int]] = {
    "first batch": (lambda error: {"data": _loader_raising(error, 0)}, 0),
    "first step": (lambda error: {"model": _Raising(error, 1)}, 0),
    "steady step": (lambda error: {"model": _Raising(error, 6)}, 5),
    "mid-epoch batch": (lambda error: {"data": _loader_raising(error, 5)}, 5),
}


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_an_interrupt_at_any_stage_returns_a_partial_report(stage: str) -> None:
    threads = _sampler_threads()
    arguments, trained = STAGES[stage]
    report = fit(**arguments(KeyboardInterrupt()))
    assert report.interrupted is True and report.steps == trained
    assert _sampler_threads() == threads


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_the_users_own_error_passes_through_unchanged_at_any_stage(stage: str) -> None:
    threads = _sampler_threads()
    error = Boom(f"raised at the {stage}")
    with pytest.raises(Boom) as raised:
        fit(**STAGES[stage][0](error))
    assert raised.value is error
    assert _sampler_threads() == threads


def test_an_error_in_the_flop_count_leaves_the_figure_out_and_trains_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A step compiled from the first batch is counted in an extra forward pass of
    accelkit's own: a failure there is a missing figure with its reason; an error that is
    the model's raises again in the loop."""
    real = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **_: real(fn, backend="eager"))
    report = fit(_Raising(Boom("only once"), 1), steps=4, compile=True)
    assert report.steps == 4 and report.flops_per_step is None
    assert "Boom: only once" in report.notes["flops_per_step"]
    interrupted = fit(_Raising(KeyboardInterrupt(), 1), steps=4, compile=True)
    assert interrupted.interrupted is True and interrupted.steps == 0


# -- reports on disk ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def report() -> accelkit.RunReport:
    return fit(steps=3)


def test_a_full_disk_leaves_the_earlier_report_whole(
    report: accelkit.RunReport, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "run.json"
    report.save(path)
    earlier = path.read_bytes()
    real_fdopen = os.fdopen

    def full_disk(*args: Any, **kwargs: Any) -> Any:
        handle = real_fdopen(*args, **kwargs)

        def write(text: str) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        handle.write = write
        return handle

    monkeypatch.setattr(os, "fdopen", full_disk)
    with pytest.raises(OSError, match="No space left"):
        report.save(path)
    assert path.read_bytes() == earlier
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]  # no temporary file left


@pytest.mark.parametrize("where", ["missing/dir/run.json", "run.json/inside"])
def test_an_unwritable_path_raises_oserror_and_writes_nothing(
    report: accelkit.RunReport, tmp_path: Any, where: str
) -> None:
    (tmp_path / "run.json").write_text("{}")  # a file where a folder is expected
    # FileNotFoundError or NotADirectoryError, worded by the platform: no match= to give.
    with pytest.raises(OSError):  # noqa: PT011
        report.save(tmp_path / where)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]
    assert (tmp_path / "run.json").read_text() == "{}"
