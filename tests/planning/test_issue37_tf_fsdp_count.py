"""Issue 37, E06: TensorFlow's refusal names the FSDP2 GPU count of accelkit's own
PyTorch plan for the same model and GPUs: one count, not one per framework."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import accelkit

SAID = re.compile(r"PyTorch FSDP2 would hold it on (\d+)")


@pytest.mark.parametrize(
    ("gpu", "params", "needed"),
    [("H100", 8e9, 3), ("H100", 70e9, 20), ("A100-SXM4-40GB", 13e9, 8)],
)
def test_the_refusal_names_the_pytorch_plans_count(gpu: str, params: float, needed: int) -> None:
    tensorflow = accelkit.plan_for(gpu, count=8, params=params, framework="tensorflow").memory
    torch = accelkit.plan_for(gpu, count=8, params=params, framework="torch").memory
    said = SAID.search(tensorflow.reason)
    assert said is not None
    assert int(said.group(1)) == torch.gpus_needed == needed
    assert tensorflow.gpus_needed == torch.gpus_needed


@settings(max_examples=60, deadline=None)
@given(
    gpu=st.sampled_from(["H100", "A100-SXM4-40GB", "L4", "H200", "Tesla T4"]),
    count=st.integers(1, 8),
    params=st.integers(10**8, 2 * 10**11),
)
def test_any_tensorflow_refusal_agrees_with_pytorch(gpu: str, count: int, params: int) -> None:
    tensorflow = accelkit.plan_for(gpu, count=count, params=params, framework="tensorflow")
    torch = accelkit.plan_for(gpu, count=count, params=params, framework="torch")
    assert tensorflow.memory.gpus_needed == torch.memory.gpus_needed
    said = SAID.search(tensorflow.memory.reason)
    if said:
        assert int(said.group(1)) == torch.memory.gpus_needed
