"""tune's gradient check where cuDNN's choice of algorithms alone moves the eager
gradients (issue 24): ResNet-50 in bf16 on an H200 had its compiled candidate refused in
the Lightning callback at 13-21% of the gradients' norm against a 10% limit, while two
correct eager passes that differ only in cuDNN's algorithms lay 35% apart at step 0
(benchmarks/check_noise.py). The check now measures that spread and allows for it, and
still refuses what no rounding explains."""

from __future__ import annotations

import contextlib
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

from accelkit.profiling.tuning import Check
from accelkit.torch.tuning import reference as reference_module
from accelkit.torch.tuning import trials
from accelkit.torch.tuning.reference import GradSample, Reference, eager_reference, other_kernels
from accelkit.torch.tuning.trial_guards import LossMismatch, check_grads


def _vectors(seed: int, spread: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Eager gradients and the other algorithms' ones, `spread` of its norm apart."""
    generator = torch.Generator().manual_seed(seed)
    eager = torch.randn(256, generator=generator)
    noise = torch.randn(256, generator=generator)
    return eager, eager + noise * (spread * eager.norm() / noise.norm())


def _verdict(compiled: torch.Tensor, reference: Reference) -> tuple[bool, Check]:
    record = Check()
    try:
        check_grads(compiled, reference, record)
    except LossMismatch:
        return False, record
    return True, record


def test_a_compiled_step_within_the_spread_of_cudnns_algorithms_passes() -> None:
    # As on the H200: the two eager passes 35% apart, the compiled step 118% from the
    # first with the same share of its direction the other pass has.
    eager, other = _vectors(0, 0.35)
    compiled = eager + (other - eager) * (1.18 / 0.35)
    reference = Reference(loss=1.0, grads=eager, kernel_grads=other)

    passed, record = _verdict(compiled, reference)
    assert passed
    assert record.grad_spread == pytest.approx(0.35, rel=1e-3)
    assert record.grad_limit == pytest.approx(trials.KERNEL_SPREAD_FACTOR * 0.35, rel=1e-3)
    assert record.grad_difference == pytest.approx(1.18, rel=1e-3)
    assert "cuDNN's algorithms alone 35%" in record.describe()

    # Without the spread measured, the same step is refused at the plain limit.
    passed_plain, plain = _verdict(compiled, Reference(loss=1.0, grads=eager))
    assert not passed_plain
    assert plain.grad_limit == trials.GRAD_RTOL and plain.grad_spread is None


def test_within_the_plain_limit_the_spread_is_not_consulted() -> None:
    eager, other = _vectors(1, 0.5)
    passed, record = _verdict(eager * 1.05, Reference(loss=1.0, grads=eager, kernel_grads=other))
    assert passed
    assert record.grad_limit == trials.GRAD_RTOL and record.grad_spread is None


def test_beyond_the_spread_a_step_is_refused_and_the_message_names_it() -> None:
    eager, other = _vectors(2, 0.05)
    compiled = eager + (other - eager) * 6  # 30%: past 10% and past 4 x 5%
    record = Check()
    with pytest.raises(LossMismatch, match=r"4x the 5.0% cuDNN's other algorithms"):
        check_grads(compiled, Reference(loss=1.0, grads=eager, kernel_grads=other), record)
    assert record.failed == "gradients" and record.grad_limit == pytest.approx(0.2, rel=1e-3)


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**16), spread=st.floats(0.11, 1.2))
def test_no_spread_lets_a_step_without_gradients_or_going_backwards_pass(
    seed: int, spread: float
) -> None:
    eager, other = _vectors(seed, spread)
    reference = Reference(loss=1.0, grads=eager, kernel_grads=other)
    for wrong in (torch.zeros_like(eager), -eager, -other):
        passed, record = _verdict(wrong, reference)
        assert not passed and record.failed == "gradients"


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    spread=st.floats(0.0, 1.0),
    moved=st.floats(0.0, 8.0),
)
def test_the_recorded_figures_say_what_the_check_decided(
    seed: int, spread: float, moved: float
) -> None:
    eager, other = _vectors(seed, spread)
    compiled = eager + (other - eager) * moved
    passed, record = _verdict(compiled, Reference(loss=1.0, grads=eager, kernel_grads=other))
    assert (record.failed == "gradients") is not passed
    difference = float((compiled - eager).norm() / eager.norm())
    if difference <= trials.GRAD_RTOL * (1 - 1e-6):
        assert passed and record.grad_spread is None
        return
    if math.isclose(difference, record.grad_limit, rel_tol=1e-3):
        return  # at the limit: rounding of the recorded figures decides nothing here
    if difference > record.grad_limit:
        assert not passed
    elif record.grad_agreement is not None:
        bound = record.agreement_limit
        assert passed is (1 / bound <= record.grad_agreement <= bound)


def test_two_eager_passes_that_share_no_direction_leave_no_verdict_but_a_refusal() -> None:
    eager = torch.tensor([1.0, 0.0, 0.0, 0.0])
    other = torch.tensor([-0.2, 1.0, 0.0, 0.0])  # eager . other < 0
    with pytest.raises(LossMismatch, match="no check can tell"):
        check_grads(eager * 1.5, Reference(loss=1.0, grads=eager, kernel_grads=other))


# -- the second eager pass -----------------------------------------------------------------


def test_the_other_algorithms_are_cudnns_deterministic_ones_and_are_put_back() -> None:
    cudnn = torch.backends.cudnn
    saved = cudnn.benchmark, cudnn.deterministic
    try:
        cudnn.benchmark, cudnn.deterministic = True, False
        switch = other_kernels(torch)
        assert switch is not None
        with switch:
            assert (cudnn.benchmark, cudnn.deterministic) == (False, True)
        assert (cudnn.benchmark, cudnn.deterministic) == (True, False)

        cudnn.deterministic = True  # the script's choice: kept, no other pass
        assert other_kernels(torch) is None
    finally:
        cudnn.benchmark, cudnn.deterministic = saved


def test_a_second_pass_with_other_algorithms_is_measured_on_cuda_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The pass's gradients depend on cuDNN's flag here as rounding makes them on a GPU;
    on a CUDA device they become `kernel_grads`, on the CPU nothing runs twice."""
    layer = torch.nn.Linear(8, 1)
    params = list(layer.parameters())
    calls = []

    def forward_backward(batch: torch.Tensor) -> torch.Tensor:
        calls.append(torch.backends.cudnn.deterministic)
        tilt = 1.01 if torch.backends.cudnn.deterministic else 1.0
        loss = layer(batch).square().mean() * tilt
        loss.backward()
        return loss

    batch = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    common = {"module": layer, "params": params, "sample": GradSample(params, torch)}

    on_cpu = eager_reference(
        forward_backward, batch, device=torch.device("cpu"), torch=torch, **common
    )
    assert on_cpu.kernel_grads is None and calls == [False]

    calls.clear()
    monkeypatch.setattr(reference_module, "_rng_state", lambda torch, device: [b""])
    monkeypatch.setattr(torch.random, "fork_rng", lambda devices: contextlib.nullcontext())
    on_cuda = eager_reference(
        forward_backward, batch, device=torch.device("cuda"), torch=torch, **common
    )
    assert calls == [False, True]
    assert on_cuda.kernel_grads is not None
    assert torch.allclose(on_cuda.kernel_grads, on_cuda.grads * 1.01)
    assert all(param.grad is None for param in params)  # the reference leaves no trace


@pytest.mark.parametrize("pass_gives", ["other gradients", "the same gradients", "an error"])
def test_every_rank_averages_as_often_whatever_its_second_pass_gave(
    monkeypatch: pytest.MonkeyPatch, pass_gives: str
) -> None:
    """Under DDP `average` is an all-reduce: a rank that called it once while another
    called it twice would hang the run. Each rank's second pass may differ (its own
    kernels, its own memory), so the calls must not depend on it."""
    layer = torch.nn.Linear(8, 1)
    params = list(layer.parameters())

    def forward_backward(batch: torch.Tensor) -> torch.Tensor:
        tilt = 1.0
        if torch.backends.cudnn.deterministic:
            if pass_gives == "an error":
                raise RuntimeError("CUDA out of memory")
            tilt = 1.01 if pass_gives == "other gradients" else 1.0
        loss = layer(batch).square().mean() * tilt
        loss.backward()
        return loss

    averaged = []

    def average(grads: torch.Tensor) -> torch.Tensor:
        averaged.append(grads)
        return grads

    monkeypatch.setattr(reference_module, "_rng_state", lambda torch, device: [b""])
    monkeypatch.setattr(torch.random, "fork_rng", lambda devices: contextlib.nullcontext())
    found = eager_reference(
        forward_backward,
        torch.randn(4, 8, generator=torch.Generator().manual_seed(1)),
        module=layer,
        params=params,
        sample=GradSample(params, torch),
        device=torch.device("cuda"),
        torch=torch,
        average=average,
    )
    assert len(averaged) == 2
    assert (found.kernel_grads is not None) is (pass_gives == "other gradients")
