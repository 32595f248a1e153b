"""The loop's LR scheduler in `accelkit.torch.tune` and `accelkit.torch.fit`: stepped where
the loop steps it, so the trials train at the schedule's learning rates (case E02).

Real tunes and fits on the CPU; the trials' ``torch.compile`` uses the fast ``eager``
backend, as in test_tune.py.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import accelkit

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from accelkit.torch.training import scheduling
from accelkit.torch.tuning import registry

from ..helpers.torch_data import CPU_PLAN, batches, mlp
from ..helpers.tuning_record import taken

STEPS = registry.trial_steps(1, cuda=False)


@pytest.fixture(autouse=True)
def eager_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    real = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **_: real(fn, backend="eager"))


def spied(optimizer: Any) -> list[float]:
    """The learning rate of each optimizer step `optimizer` takes from now on."""
    seen: list[float] = []
    optimizer.register_step_pre_hook(lambda opt, *_: seen.append(opt.param_groups[0]["lr"]))
    return seen


def one_cycle(optimizer: Any, total: int) -> Any:
    return torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1e-2, total_steps=total)


def expected_rates(total: int) -> list[float]:
    """What a loop that steps OneCycleLR after every optimizer step trains each step at."""
    optimizer = torch.optim.AdamW([torch.zeros(1, requires_grad=True)], lr=1e-2)
    schedule, rates = one_cycle(optimizer, total), []
    for _ in range(total):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    return rates


def untuned_fit(model: Any, optimizer: Any, n: int, **kwargs: Any) -> Any:
    """`accelkit.torch.fit` of `n` batches without tune, as a script with a scheduler."""
    data, loss_fn = batches(n, dim=16, classes=4), torch.nn.CrossEntropyLoss()
    return accelkit.torch.fit(
        model, data, optimizer, loss_fn, plan=CPU_PLAN, progress=False, tune=False, **kwargs
    )


def test_the_trials_step_the_loops_scheduler_so_the_run_follows_its_schedule() -> None:
    total = STEPS + 10
    model = mlp(16, 32, 4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    schedule = one_cycle(optimizer, total)
    rates = spied(optimizer)
    data: Iterator[Any] = iter(batches(total, dim=16, classes=4))
    result = accelkit.torch.tune(
        model, data, optimizer, torch.nn.CrossEntropyLoss(), plan=CPU_PLAN, scheduler=schedule
    )
    for x, y in data:  # the loop goes on from the next batch
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        schedule.step()
    assert result.steps == taken(result.trials) <= STEPS and schedule.last_epoch == total
    assert rates == pytest.approx(expected_rates(total), rel=1e-12)


def test_tune_refuses_an_optimizer_whose_scheduler_it_was_not_given() -> None:
    model = mlp(16, 32, 4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    one_cycle(optimizer, 100)
    rates = spied(optimizer)
    with pytest.raises(ValueError, match=r"pass it as scheduler="):
        accelkit.torch.tune(
            model, iter(batches(STEPS, dim=16, classes=4)), optimizer, None, plan=CPU_PLAN
        )
    assert rates == []  # refused before any step


def test_the_fit_steps_a_scheduler_per_optimizer_step_or_per_epoch() -> None:
    model = mlp(16, 32, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    per_step = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda n: 1 / (n + 1))
    rates = spied(optimizer)
    untuned_fit(model, optimizer, 8, accumulation_steps=2, scheduler=per_step)
    assert rates == pytest.approx([1, 1 / 2, 1 / 3, 1 / 4])

    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    per_epoch = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    rates = spied(optimizer)
    untuned_fit(model, optimizer, 3, epochs=2, scheduler=per_epoch, scheduler_interval="epoch")
    assert rates == [1.0] * 3 + [0.5] * 3 and per_epoch.last_epoch == 2


def test_the_fit_names_a_bound_scheduler_it_was_not_given(
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = mlp(16, 32, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    with caplog.at_level(logging.WARNING, logger="accelkit"):
        untuned_fit(model, optimizer, 2)
    assert "pass scheduler=" in caplog.text


def test_a_scheduler_of_another_optimizer_or_no_scheduler_is_refused_by_name() -> None:
    model = mlp(16, 32, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    other = torch.optim.SGD(model.parameters(), lr=1.0)
    with pytest.raises(ValueError, match="schedules another optimizer"):
        scheduling.check(
            torch.optim.lr_scheduler.StepLR(other, 1), optimizer, "step", refuse_unbound=True
        )
    with pytest.raises(ValueError, match=r"must be a torch\.optim\.lr_scheduler\.LRScheduler"):
        scheduling.check(other, optimizer, "step", refuse_unbound=True)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
    with pytest.raises(ValueError, match="validation metric"):
        scheduling.check(plateau, optimizer, "step", refuse_unbound=True)


@given(st.text(max_size=12).filter(lambda text: text not in scheduling.INTERVALS))
def test_an_interval_that_is_not_step_or_epoch_is_refused_naming_both(interval: str) -> None:
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    with pytest.raises(ValueError, match=r"is not one of 'step', 'epoch'"):
        scheduling.check(None, optimizer, interval, refuse_unbound=False)
