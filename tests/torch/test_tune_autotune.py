"""`tune`'s max-autotune candidate: tried where compile was kept and the run left pays for
its autotuning, checked and timed like compile's, recorded with its mode.

Real fits on the CPU, through a real ``torch.compile`` on the fast ``eager`` backend that
records the modes it was asked for; max-autotune itself tunes GPU kernels, so the
device check is told the run is on CUDA (the GPU run: tests/torch/test_tune_gpu.py).
"""

from __future__ import annotations

import time
import types
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import accelkit
from accelkit.profiling.tuning import Trial

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from accelkit.torch.tuning import registry, trials

from ..helpers.torch_data import CPU_PLAN, batches
from ..helpers.tuning_record import units


class SlowWhenEager(torch.nn.Module):
    """An MLP that sleeps in its eager forward only (compiled code leaves the sleep out),
    so compile is clearly faster than eager and kept."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(256, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8)
        )

    def forward(self, x: Any) -> Any:
        if not torch.compiler.is_compiling():
            time.sleep(0.25)  # beyond a load burst on a busy CI machine: every pair says so
        return self.net(x)


@pytest.fixture
def modes(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """The modes the tuner's ``torch.compile`` calls asked for (compiled on ``eager``), and
    the device check answered as for a CUDA run."""
    asked: list[str | None] = []
    real = torch.compile

    def compile_(fn: Any, mode: str | None = None, **_: Any) -> Any:
        asked.append(mode)
        return real(fn, backend="eager")

    monkeypatch.setattr(torch, "compile", compile_)
    unsupported = trials.autotune_unsupported
    cuda = types.SimpleNamespace(type="cuda")
    monkeypatch.setattr(trials, "autotune_unsupported", lambda _, kept: unsupported(cuda, kept))
    return asked


def unsized(data: list[Any]) -> Iterator[Any]:
    yield from data  # no len(): the run's length is the fit's steps=


def tuned_fit(steps: int, data: list[Any]) -> Any:
    model = SlowWhenEager()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    return accelkit.torch.fit(
        model, unsized(data), optimizer, torch.nn.CrossEntropyLoss(), plan=CPU_PLAN,
        progress=False, tune=True, steps=steps,
    )  # fmt: skip


def test_max_autotune_is_tried_checked_and_recorded_when_the_run_pays_for_it(
    modes: list[str | None],
) -> None:
    data = batches(registry.trial_steps(1) + 4)
    report = tuned_fit(10**7, data)  # a run of ten million steps: autotuning pays
    by_name = {c["name"]: c for c in report.tuning["candidates"]}
    compiled = by_name["compile"]
    autotune = by_name["max-autotune"]
    # compile was kept over eager (whose forward sleeps), max-autotune tried on top of it
    assert compiled["why"].split(" (pairs ")[0].endswith("x eager"), compiled["why"]
    assert (compiled["status"] == "chosen") != (autotune["status"] == "chosen")
    assert autotune["settings"]["compile_mode"] == "max-autotune-no-cudagraphs"
    assert autotune["steps"] == units(autotune)
    assert autotune["check"]["failed"] is None and autotune["status"] in ("chosen", "slower")
    # compiled anew from the eager step, in its mode (CUDA graphs were not kept: CPU)
    assert modes.count("max-autotune-no-cudagraphs") == 1 and None in modes
    expected = "max-autotune-no-cudagraphs" if autotune["status"] == "chosen" else None
    assert report.tuning["compile_mode"] == expected
    assert report.steps == len(data)  # every batch trained once, the trial's too


def test_a_run_too_short_to_pay_for_it_skips_max_autotune_and_says_why(
    modes: list[str | None],
) -> None:
    data = batches(registry.trial_steps(1) + 4)
    report = tuned_fit(len(data), data)
    autotune = next(c for c in report.tuning["candidates"] if c["name"] == "max-autotune")
    assert autotune["status"] == "skipped" and "would not pay back" in autotune["why"]
    assert "max-autotune-no-cudagraphs" not in modes


def test_a_compile_from_inductors_cache_prices_no_max_autotune(
    monkeypatch: pytest.MonkeyPatch, modes: list[str | None]
) -> None:
    """Before: on an H100 a 1B Llama's default compile came from the disk cache of the
    process before it, max-autotune was priced at 12x that short compile and tried, and
    its autotuning outlasted the call (docs/benchmarks.md). Now a compile whose graphs
    came from inductor's cache is recorded as such and prices no max-autotune. The
    backend here does what inductor does when its cache holds the graph: counts a hit."""
    from torch._dynamo.utils import counters

    def from_cache(graph: Any, inputs: Any) -> Any:
        counters["inductor"]["fxgraph_cache_hit"] += 1
        return graph.forward

    def compile_(fn: Any, mode: str | None = None, **_: Any) -> Any:
        modes.append(mode)
        return torch._dynamo.optimize(from_cache)(fn)

    monkeypatch.setattr(torch, "compile", compile_)
    report = tuned_fit(10**7, batches(registry.trial_steps(1) + 4))
    by_name = {c["name"]: c for c in report.tuning["candidates"]}
    assert by_name["compile"]["compile_cached"] is True
    assert "(cached)" in str(report)  # the tuning table says its compile time is the cache's
    autotune = by_name["max-autotune"]
    assert autotune["status"] == "skipped", autotune
    assert autotune["why"].startswith("the default compile took graphs from inductor's cache")
    assert "max-autotune-no-cudagraphs" not in modes


def test_a_compile_from_scratch_is_recorded_as_not_cached(modes: list[str | None]) -> None:
    data = batches(registry.trial_steps(1) + 4)
    report = tuned_fit(len(data), data)
    compiled = next(c for c in report.tuning["candidates"] if c["name"] == "compile")
    assert compiled["compile_cached"] is False  # the eager backend takes nothing from a cache
    assert "(cached)" not in str(report)


def test_inductors_cache_hits_are_counted_where_a_graph_is_compiled_again(tmp_path) -> None:
    """The real counter, with inductor on the CPU: the same graph compiled a second time
    (another module of the same shape) is taken from the cache."""
    from accelkit.torch.tuning import trial_guards

    def step(seed: int) -> int:
        torch.manual_seed(seed)
        model = torch.compile(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()))
        before = trial_guards.inductor_cache_hits(torch)
        model(torch.randn(2, 8)).sum().backward()
        return trial_guards.inductor_cache_hits(torch) - before

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
        step(0)
        torch._dynamo.reset()
        assert step(1) > 0


def hand_tuned(data: list[Any], **kwargs: Any) -> Any:
    model = SlowWhenEager()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    return accelkit.torch.tune(
        model, iter(data), optimizer, torch.nn.CrossEntropyLoss(), plan=CPU_PLAN, **kwargs
    )


def test_a_hand_written_loop_that_gives_its_length_gets_max_autotune_tried(
    modes: list[str | None],
) -> None:
    """Before: `accelkit.torch.tune` priced max-autotune on its own trials' steps, so a hand
    loop of any length had it skipped as too short."""
    data = batches(registry.trial_steps(1) + 4)
    result = hand_tuned(data, steps=10**7)
    autotune = next(t for t in result.trials if t.name == "max-autotune")
    assert autotune.status in ("chosen", "slower") and autotune.check is not None
    assert modes.count("max-autotune-no-cudagraphs") == 1
    assert result.compile_mode == (
        "max-autotune-no-cudagraphs" if autotune.status == "chosen" else None
    )
    unknown = next(t for t in hand_tuned(data).trials if t.name == "max-autotune")
    assert unknown.status == "skipped" and unknown.why.startswith(trials.UNKNOWN_LENGTH)


@pytest.mark.parametrize("steps", [0, -5, 2.5, True, "1000"])
def test_tune_refuses_a_length_that_is_not_a_number_of_steps(steps: Any) -> None:
    with pytest.raises(ValueError, match=r"steps=.* must be a whole number >= 1"):
        hand_tuned(batches(4), steps=steps)


@given(
    planned=st.integers(0, 10**7),
    done=st.integers(0, 10**4),
    step=st.floats(1e-4, 10.0),
    unit=st.integers(1, 8),
    compile_seconds=st.floats(0.0, 600.0),
)
def test_max_autotune_pays_exactly_when_its_cost_is_a_tenth_of_the_run_left(
    planned: int, done: int, step: float, unit: int, compile_seconds: float
) -> None:
    kept = Trial("compile", {"compile": True}, step_seconds=step)
    compiled = Trial("compile", {"compile": True}, compile_seconds=compile_seconds)
    why = trials.autotune_unpaid(planned, done, kept, unit, compiled)
    left = max(planned - done, 0) * step / unit
    cost = trials.AUTOTUNE_COMPILE_FACTOR * max(compile_seconds, 1.0)
    assert (why is None) == (cost <= trials.AUTOTUNE_SHARE * left)
    if why is not None:
        assert f"{left:.0f} s left" in why and f"about {cost:.0f} s" in why


def test_max_autotune_needs_a_known_length_a_timed_compile_and_a_kept_one() -> None:
    kept = Trial("compile", {"compile": True}, step_seconds=0.1)
    timed = Trial("compile", {"compile": True}, compile_seconds=30.0)
    assert "length is unknown" in trials.autotune_unpaid(None, 0, kept, 1, timed)
    assert "not measured" in trials.autotune_unpaid(10**6, 0, kept, 1, None)
    cuda, cpu = types.SimpleNamespace(type="cuda"), types.SimpleNamespace(type="cpu")
    assert trials.autotune_unsupported(cuda, kept) is None
    assert "GPU kernels" in trials.autotune_unsupported(cpu, kept)
    eager = Trial("eager", {"compile": False}, step_seconds=0.1)
    assert trials.autotune_unsupported(cuda, eager) == "torch.compile was not kept"
