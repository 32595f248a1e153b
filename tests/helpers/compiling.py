"""``torch.compile`` made fast and, where asked, wrong, for the tests of `tune`'s checks.

`compiled_as` swaps ``torch.compile`` for one with the ``eager`` backend (dynamo traces,
nothing is generated: a second per compile, not tens) and can change what a compiled
function returns, as a miscompile would; `refusing` is a backend that fails on some graphs,
as a compiler fails on an op it cannot lower.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch


@contextlib.contextmanager
def compiled_as(
    then: Callable[[Any], Any] | None = None, backend: Any = "eager"
) -> Iterator[list[str]]:
    """``torch.compile`` with the ``eager`` backend (or `backend`) while inside;
    `then(output) -> output` changes what compiled functions return. Yields the modes
    asked for, one per compile."""
    real = torch.compile
    modes: list[str] = []

    def patched(fn: Callable[..., Any], **options: Any) -> Callable[..., Any]:
        modes.append(str(options.get("mode")))
        compiled = real(fn, backend=backend)
        if then is None:
            return compiled
        return lambda *args, **kwargs: then(compiled(*args, **kwargs))

    torch.compile = patched
    try:
        yield modes
    finally:
        torch.compile = real
        torch._dynamo.reset()  # past dynamo's recompile limit later tests would run eagerly


def refusing(op: Any) -> Callable[..., Any]:
    """A backend that runs each graph as traced, but raises on one that calls `op`."""

    def backend(graph: Any, example_inputs: Any) -> Any:
        if any(node.target is op for node in graph.graph.nodes):
            raise RuntimeError(f"this backend cannot compile {op.__name__}")
        return graph.forward

    return backend


def no_gradients(output: Any) -> Any:
    """The same values with gradients of zero: a compiled backward that lost the graph."""
    return output.detach() + 0.0 * output


def graphs_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CUDA-graph candidate's device check told CUDA (its GPU run: test_tune_gpu.py)."""
    from accelkit.torch.tuning import graphs

    cuda, unsupported = types.SimpleNamespace(type="cuda"), graphs.unsupported
    monkeypatch.setattr(graphs, "unsupported", lambda t, _, **kw: unsupported(t, cuda, **kw))


def graphs_judged(monkeypatch: pytest.MonkeyPatch, *, kept: bool) -> list[bool]:
    """The CUDA-graph candidate judged faster (`kept`) or not, whatever its times (the
    other candidates judged as they are); returns the list that each release of the CUDA
    graphs' memory (`graphs.release`) appends to."""
    from accelkit.torch.tuning import graphs, trials

    faster, released = trials.clearly_faster, []

    def judged(trial: Any, best: Any) -> bool:
        return kept if trial.settings.get("cudagraphs") else faster(trial, best)

    monkeypatch.setattr(trials, "clearly_faster", judged)
    monkeypatch.setattr(graphs, "release", lambda torch, device: released.append(True))
    return released


def graphs_out_of_memory(monkeypatch: pytest.MonkeyPatch, *, fails_from: int = 1) -> list[str]:
    """The CUDA-graph candidate's compiled code raises CUDA's out-of-memory error from its
    `fails_from`-th call on (those before run as compiled: a check that only warmed the
    graphs up), as graphs that run out of memory when they record; other compiles use the
    ``eager`` backend (call ``torch._dynamo.reset()`` after). Returns the list that each
    failed call ("graphs' step") and each release of the graphs' memory ("release")
    appends to."""
    from accelkit.torch.tuning import graphs

    graphs_on_cuda(monkeypatch)
    events: list[str] = []
    monkeypatch.setattr(graphs, "release", lambda torch, device: events.append("release"))
    real = torch.compile

    def compile(fn: Callable[..., Any], **options: Any) -> Callable[..., Any]:
        compiled = real(fn, backend="eager")
        if not graphs.captures(options.get("mode")):
            return compiled
        calls = []

        def out_of_memory(*args: Any, **kwargs: Any) -> Any:
            calls.append(1)
            if len(calls) < fails_from:
                return compiled(*args, **kwargs)
            events.append("graphs' step")
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 3.91 GiB.")

        return out_of_memory

    monkeypatch.setattr(torch, "compile", compile)
    return events


class GraphsPool:
    """A CUDA-graph candidate's memory pool, told on the CPU: the graphs' code takes it as
    it runs (`graphs_holding_a_pool`), `graphs.release` gives it back; eager code that
    `allocate`s runs out of memory while it is held (as a Llama-3.2-1B's eager step would
    beside its graphs' 37 GiB on an H100)."""

    def __init__(self) -> None:
        self.held = False
        self.released = self.failed = 0

    def allocate(self) -> None:
        """An eager pass's allocation: CUDA's out-of-memory error while the pool is held
        (not while dynamo traces)."""
        if self.held and not torch.compiler.is_compiling():
            self.failed += 1
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB.")


def graphs_holding_a_pool(monkeypatch: pytest.MonkeyPatch, *, beside_eager: bool) -> GraphsPool:
    """The CUDA-graph candidate's device check told CUDA, and its code (compiled with the
    ``eager`` backend, like every compile here: call ``torch._dynamo.reset()`` after)
    holding the returned pool from its first call until `graphs.release`;
    `beside_eager`: every candidate judged slower, so that the best so far in the graphs'
    paired rounds is the eager baseline."""
    from accelkit.torch.tuning import graphs, trials

    graphs_on_cuda(monkeypatch)
    if beside_eager:
        monkeypatch.setattr(trials, "clearly_faster", lambda trial, best: False)
    pool, real = GraphsPool(), torch.compile

    def compile(fn: Callable[..., Any], **options: Any) -> Callable[..., Any]:
        compiled = real(fn, backend="eager")
        if not graphs.captures(options.get("mode")):
            return compiled

        def graphed(*args: Any, **kwargs: Any) -> Any:
            out = compiled(*args, **kwargs)
            pool.held = True
            return out

        return graphed

    def release(torch: Any, device: Any) -> None:
        pool.held, pool.released = False, pool.released + 1

    monkeypatch.setattr(torch, "compile", compile)
    monkeypatch.setattr(graphs, "release", release)
    return pool


class NeedsThePool(torch.nn.Module):
    """`inner`, whose eager forward runs out of memory while `pool` is held."""

    def __init__(self, inner: torch.nn.Module, pool: GraphsPool) -> None:
        super().__init__()
        self.inner, self.pool = inner, pool

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        self.pool.allocate()
        return self.inner(*args, **kwargs)


def backward_refusing_new_shapes(size: int | None = None) -> Any:
    """A backend (AOT autograd, each graph run as traced) whose backward compiler fails on
    a graph of symbolic shapes, or with a dimension of `size`, as a compiler fails to
    lower the backward pass of a recompile for a new shape. AOT autograd lowers a
    backward pass at its first call unless asked to do it as the forward compiles, so the
    error comes from ``loss.backward()`` by default."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func

    def as_traced(graph: Any, example_inputs: Any) -> Any:
        return make_boxed_func(graph.forward)

    def backward(graph: Any, example_inputs: Any) -> Any:
        sizes = [s for x in example_inputs for s in (x.shape if torch.is_tensor(x) else [x])]
        if size in sizes or any(isinstance(s, torch.SymInt) for s in sizes):
            raise RuntimeError("this backend cannot lower the backward pass of a new shape")
        return as_traced(graph, example_inputs)

    return aot_autograd(fw_compiler=as_traced, bw_compiler=backward)
