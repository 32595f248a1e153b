"""The setting-key registry is complete: every key the planner can emit has whoever
applies it, and every adapter applies only the keys the registry gives it."""

from __future__ import annotations

import itertools
import json

import pytest

from accelkit.hardware.info import GpuInfo, HardwareInfo, LauncherEnv, Link
from accelkit.hardware.what_if import what_if
from accelkit.planning import Request, Status, plan
from accelkit.planning.keys import ADAPTER, REGISTRY, CrossDevice, Key, Kind, Phase
from accelkit.planning.types import Plan

GPUS = [
    None,
    "Tesla P100-PCIE-16GB",
    "Tesla T4",
    "A100-SXM4-80GB",
    "GeForce RTX 4090",
    "NVIDIA H200",
]
LAUNCHERS = [
    {},
    {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"},
    {
        "TF_CONFIG": json.dumps(
            {"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 0}}
        )
    },
]
NO_P2P = HardwareInfo(
    gpus=tuple(GpuInfo(i, "NVIDIA GeForce RTX 4090", compute_capability=(8, 9)) for i in range(2)),
    links=(Link(0, 1, p2p=False),),
    launcher=LauncherEnv(rank=0, local_rank=0, world_size=4, local_world_size=2),
    source="snapshot",
)
MIG = HardwareInfo(
    gpus=(GpuInfo(0, "NVIDIA A100-SXM4-80GB", compute_capability=(8, 0), mig_enabled=True),),
    source="snapshot",
)


def _plans() -> list[Plan]:
    """Plans across generations, GPU counts, launchers, frameworks and requests."""
    found = []
    for gpu, count, environ in itertools.product(GPUS, (1, 2), LAUNCHERS):
        if gpu is None and count > 1:
            continue
        hardware = what_if(gpu, count, environ=environ)
        for framework, precision, compile in itertools.product(
            ("torch", "tensorflow"), ("auto", "fp32", "fp16"), (False, True)
        ):
            found.append(
                plan(hardware, Request(framework=framework, precision=precision, compile=compile))
            )
    for hardware in (NO_P2P, MIG):
        found += [plan(hardware, Request(framework=f)) for f in ("torch", "tensorflow")]
    # model sizes: replicated, sharded, checkpointed, offloaded and refused (plan.memory)
    for gpu, count, params, activations in (
        ("NVIDIA H200", 1, 1e9, None),
        ("NVIDIA H200", 2, 8e9, None),
        ("NVIDIA H200", 2, 8e9, 80e9),
        ("A100-SXM4-80GB", 1, 70e9, None),
    ):
        for framework in ("torch", "tensorflow"):
            found.append(
                plan(
                    what_if(gpu, count, environ=LAUNCHERS[1]),
                    Request(framework=framework, params=params, activation_bytes=activations),
                )
            )
    return found


PLANS = _plans()
EMITTED = {setting.key for p in PLANS for setting in p.settings}


def _appliers(framework: str) -> dict:
    if framework == "torch":
        from accelkit.frameworks import torch_adapter

        return torch_adapter.appliers()
    from accelkit.frameworks import tensorflow_adapter

    return tensorflow_adapter.appliers()


def test_every_key_is_registered_and_every_registered_key_can_be_emitted() -> None:
    assert set(REGISTRY) == set(Key)
    assert set(Key) == EMITTED, f"never planned: {sorted(set(Key) - EMITTED)}"


@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_each_adapter_applies_exactly_the_keys_the_registry_gives_it(framework) -> None:
    pytest.importorskip("torch" if framework == "torch" else "tensorflow")
    given = {
        key
        for key, entry in REGISTRY.items()
        if entry.by_adapter and entry.framework in (framework, "any")
    }
    applied = set(_appliers(framework))
    # Environment variables without an applier of their own are set by `apply_env`.
    plain_env = {key for key in given - applied if REGISTRY[key].kind is Kind.ENV}
    assert applied | plain_env == given
    assert applied <= given


def test_keys_not_applied_by_an_adapter_name_who_applies_them() -> None:
    for key, entry in REGISTRY.items():
        if entry.by_adapter:
            assert entry.kind in (Kind.ENV, Kind.FLAG), key
            assert entry.phase < Phase.FIT, key
        else:
            assert entry.applied_by != ADAPTER and entry.applied_by.strip(), key
            assert entry.kind in (Kind.HELPER, Kind.ADVICE), key
            assert entry.phase >= Phase.FIT, key


def test_every_emitted_setting_has_a_reason_and_a_registered_framework() -> None:
    for result in PLANS:
        for setting in result.settings:
            assert setting.reason.strip(), setting.key
            assert setting.framework in ("any", result.framework.value), setting.key


def test_a_plan_round_trips_through_json_with_typed_keys_and_values() -> None:
    for result in PLANS:
        loaded = Plan.from_dict(json.loads(json.dumps(result.to_dict())))
        assert loaded.to_dict() == result.to_dict()
        assert all(isinstance(s.key, Key) for s in loaded.settings)


def test_the_tensorflow_cross_device_choice_is_a_typed_value() -> None:
    values = {p.value(Key.TF_STRATEGY) for p in PLANS if p.get(Key.TF_STRATEGY)}
    assert values == set(CrossDevice)
    assert plan(NO_P2P, Request(framework="tensorflow")).value(Key.TF_STRATEGY) in (
        CrossDevice.HIERARCHICAL_COPY,
        CrossDevice.NCCL,
    )


def test_compile_is_one_decision() -> None:
    for framework, key in (("torch", Key.TORCH_COMPILE), ("tensorflow", Key.KERAS_JIT_COMPILE)):
        on = plan(what_if("NVIDIA H200"), Request(framework=framework, compile=True))
        off = plan(what_if("NVIDIA H200"), Request(framework=framework))
        assert on.compile and on.value(key) is True and on.to_dict()["compile"] is True
        assert not off.compile and off.get(key) is None


def test_walk_marks_helpers_deferred_to_the_helper_the_registry_names() -> None:
    from accelkit.frameworks._common import walk

    result = plan(what_if("Tesla T4"), Request(framework="torch", compile=True))
    walked = walk(result, {}, framework="torch")
    for setting in walked.settings:
        entry = REGISTRY[setting.key]
        if entry.kind is Kind.HELPER:
            assert setting.status is Status.DEFERRED
            assert entry.applied_by in setting.detail
