"""What a CUDA-graph candidate returns is copied out of the graphs' memory
(`accelkit.torch.tuning.graphs`): a graph's outputs live in its pool and its next replay
overwrites them, so a loss or output a trainer keeps would change under it. Simulated on
the CPU by compiled code that returns one static buffer per shape, as a graph does
(``mode="reduce-overhead"`` itself compiles without graphs on the CPU); the GPU run is
tests/torch/test_tune_gpu.py."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from accelkit.torch.tuning import graphs
from accelkit.torch.tuning.in_trainer import Compiled

from ..helpers.compiling import compiled_as


class Pool:
    """A CUDA graph's static outputs: one buffer per shape, overwritten at each call."""

    def __init__(self) -> None:
        self.buffers: dict[tuple[int, ...], Any] = {}

    def __call__(self, output: Any) -> Any:
        buffer = self.buffers.setdefault(tuple(output.shape), torch.empty_like(output))
        with torch.no_grad():
            buffer.copy_(output)
        return buffer


def test_replayed_begins_a_replay_per_call_and_returns_copies(monkeypatch) -> None:
    begun: list[int] = []
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: begun.append(1))
    pool = Pool()
    call = graphs.replayed(torch, lambda x: {"out": pool(x * 2)})
    first = call(torch.ones(3))["out"]
    call(torch.full((3,), 5.0))
    assert torch.equal(first, torch.full((3,), 2.0)) and len(begun) == 2


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_a_graphed_forward_keeps_what_it_returned(mode) -> None:
    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 2)
    x1, x2 = torch.randn(3, 4), torch.randn(3, 4)
    expected = layer(x1).detach()
    with compiled_as(then=Pool()):
        compiled = Compiled(torch, [layer], mode=mode)
        compiled.on()
        first = layer(x1)
        layer(x2)
        compiled.off()
    # without graphs' copying (mode None) the pool's reuse shows: the simulation bites
    assert torch.allclose(first, expected) == (mode == "reduce-overhead")


def test_a_graphed_lightning_step_keeps_its_loss() -> None:
    pytest.importorskip("lightning")
    from accelkit.lightning._compiled_step import CompiledStep

    class Module(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(4, 1)
            self.logged: list[Any] = []

        def log(self, name: str, value: Any) -> None:
            self.logged.append(value)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            loss = self.net(batch).square().mean()
            self.log("loss", loss)
            return loss

    module = Module()
    x1, x2 = torch.randn(8, 4), torch.randn(8, 4)
    expected = module.training_step(x1, 0).detach()
    with compiled_as(then=Pool()):
        step = CompiledStep(torch, module, mode="reduce-overhead")
        step.on()
        first = module.training_step(x1, 0)
        module.training_step(x2, 1)
        step.off()
    assert torch.allclose(first, expected)
    assert torch.allclose(module.logged[1], expected)  # the real log call, after the graph
