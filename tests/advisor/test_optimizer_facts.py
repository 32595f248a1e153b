"""`accelkit.torch.measuring.facts.optimizer_facts`: the implementation an optimizer's step runs,
decided as torch.optim decides it, read from real optimizers on this CPU (and on a
GPU where there is one)."""

from __future__ import annotations

import functools

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from accelkit.torch.measuring.facts import model_facts, optimizer_facts

from ..helpers.torch_data import mlp


def facts(make, model=None, **kwargs):
    model = mlp(16, 64, 4) if model is None else model
    return optimizer_facts(make(model.parameters(), lr=1e-3, **kwargs))


def test_adamw_on_the_cpu_defaults_to_the_for_loop_with_fused_available() -> None:
    # torch.optim picks foreach only where all parameters sit on a device with foreach
    # kernels (CUDA, XPU, MTIA); the CPU has fused AdamW kernels but no foreach ones.
    found = facts(torch.optim.AdamW)
    assert found == {
        "type": "AdamW",
        "implementation": "for-loop",
        "foreach_available": False,
        "fused_available": True,
        "set_by_user": False,
        "parameter_tensors": 4,
        "param_groups": 1,
    }


@pytest.mark.parametrize(
    ("flags", "implementation"),
    [
        ({"foreach": False}, "for-loop"),
        ({"fused": False}, "for-loop"),  # either flag set bypasses the default: the for-loop
        ({"fused": True}, "fused"),
        ({"foreach": True}, "foreach"),  # forced on the CPU: torch's slow per-tensor path
    ],
)
def test_flags_set_by_the_script_are_read_as_torch_reads_them(flags, implementation) -> None:
    found = facts(torch.optim.AdamW, **flags)
    assert found["implementation"] == implementation and found["set_by_user"] is True


def test_optimizers_without_fused_or_foreach_say_so() -> None:
    assert facts(torch.optim.RMSprop)["fused_available"] is False
    lbfgs = optimizer_facts(torch.optim.LBFGS(mlp(16, 64, 4).parameters()))
    assert lbfgs["implementation"] == "for-loop"
    assert not lbfgs["foreach_available"] and not lbfgs["fused_available"]


def test_frozen_parameters_are_not_counted_and_groups_are() -> None:
    model = mlp(16, 64, 4)
    model[0].weight.requires_grad_(False)
    groups = [{"params": [model[0].bias]}, {"params": list(model[2].parameters()), "lr": 1e-4}]
    found = optimizer_facts(torch.optim.SGD(groups, lr=0.1))
    assert found["parameter_tensors"] == 3 and found["param_groups"] == 2


def test_something_that_is_not_an_optimizer_gives_only_its_type() -> None:
    assert optimizer_facts(object()) == {"type": "object"}


def test_model_facts_carry_the_optimizer_and_whether_the_model_is_compiled() -> None:
    model = mlp(16, 64, 4)
    found = model_facts(model, torch.optim.AdamW(model.parameters(), foreach=False))
    assert found["optimizer"]["implementation"] == "for-loop"
    assert found["model_compiled"] is False
    assert model_facts(torch.compile(model))["model_compiled"] is True
    assert "optimizer" not in model_facts(model)


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("flags", "implementation"),
    [({}, "foreach"), ({"fused": True}, "fused"), ({"foreach": False}, "for-loop")],
)
def test_the_fact_names_the_function_torch_runs_on_cuda(flags, implementation, monkeypatch) -> None:
    """On CUDA the default is foreach; checked against the function adam.adam calls."""
    from torch.optim import adam

    ran = []
    for name, kind in (
        ("_single_tensor_adam", "for-loop"),
        ("_multi_tensor_adam", "foreach"),
        ("_fused_adam", "fused"),
    ):
        original = getattr(adam, name)
        monkeypatch.setattr(
            adam,
            name,
            functools.partial(
                lambda original, kind, *a, **k: (ran.append(kind), original(*a, **k))[1],
                original,
                kind,
            ),
        )
    model = mlp(16, 64, 4).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), **flags)
    model(torch.randn(8, 16, device="cuda")).sum().backward()
    optimizer.step()
    found = optimizer_facts(optimizer)
    assert ran == [implementation] == [found["implementation"]]
    assert found["foreach_available"] is True and found["fused_available"] is True
