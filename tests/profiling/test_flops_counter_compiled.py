"""The FLOP counter around compiled code (a door counts the run's own first step, which
the script may have compiled): the step is counted, and the compiled code runs compiled
again afterwards."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

from accelkit.profiling.flops_torch import counted, flop_counter


@pytest.mark.parametrize("warm", [False, True], ids=["first call counted", "later call"])
def test_compiled_code_counted_as_it_runs_stays_compiled(warm: bool) -> None:
    """Before: dynamo skipped a compiled function called under the counter's dispatch
    mode and never ran its compiled code again (torch 2.13): a script's compile was off
    for the rest of the run after the doors' count of the first step."""
    graphs: list[int] = []

    def backend(graph: Any, example_inputs: Any) -> Any:
        def run(*args: Any) -> Any:
            graphs.append(1)
            return graph.forward(*args)

        return run

    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    step = torch.compile(lambda x: model(x).sum(), backend=backend)
    x = torch.randn(8, 16)
    try:
        if warm:
            step(x).backward()
        before = len(graphs)
        with flop_counter() as counter:
            step(x).backward()
        assert counted(counter).total == 3 * 2 * 8 * (16 * 32 + 32 * 4) - 2 * 8 * 16 * 32
        assert len(graphs) == before  # counted eager
        step(x).backward()
        step(x).backward()
        assert len(graphs) == before + 2  # and compiled again after
    finally:
        torch._dynamo.reset()
