"""accelkit.torch.distributed.sharding's parts on one CPU process (the 2-rank runs are
tests/distributed/test_torch_fsdp.py)."""

from __future__ import annotations

import re
import sys

import pytest

torch = pytest.importorskip("torch")

from accelkit.torch.distributed import sharding

pytestmark = pytest.mark.torch


def test_the_blocks_of_a_hugging_face_model_are_its_no_split_modules() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=3, n_embd=16, n_head=2, vocab_size=32, n_positions=8)
    model = transformers.GPT2LMHeadModel(config)
    blocks = sharding.find_blocks(model)
    assert [name for name, _ in blocks] == ["transformer.h.0", "transformer.h.1", "transformer.h.2"]
    assert {type(block).__name__ for _, block in blocks} == {"GPT2Block"}


def test_the_blocks_are_the_repeated_children_holding_most_parameters() -> None:
    class Layer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.mlp = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))

        def forward(self, x):
            return self.mlp(x)

    # The Layers hold more than the inner Linears in any one container; the Linears
    # inside a Layer are left to it.
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), *[Layer() for _ in range(3)])
    assert [name for name, _ in sharding.find_blocks(model)] == ["1", "2", "3"]
    assert sharding.find_blocks(torch.nn.Linear(2, 2)) == []


def test_checkpointed_blocks_give_the_same_gradients_and_keep_their_state_dict() -> None:
    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(3)])

    plain, checkpointed = model(), model()
    sharding.apply_activation_checkpointing(sharding.find_blocks(checkpointed))
    sharding.apply_activation_checkpointing(sharding.find_blocks(checkpointed))  # once only
    x = torch.randn(2, 4)
    for net in (plain, checkpointed):
        net(x).square().sum().backward()
    for a, b in zip(plain.parameters(), checkpointed.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)
    assert plain.state_dict().keys() == checkpointed.state_dict().keys()


def test_a_torch_without_fully_shard_is_refused_naming_its_version(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "torch.distributed.fsdp", None)
    monkeypatch.setitem(sys.modules, "torch.distributed._composable.fsdp", None)
    with pytest.raises(
        RuntimeError, match=f"this PyTorch \\({re.escape(torch.__version__)}\\) has no fully_shard"
    ):
        sharding.fsdp_api()


def test_an_optimizer_that_stepped_is_refused_before_sharding() -> None:
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(1, 2)).sum().backward()
    optimizer.step()
    with pytest.raises(ValueError, match="has stepped already"):
        sharding.check_optimizer_state(optimizer)
