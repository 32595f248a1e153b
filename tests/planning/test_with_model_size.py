"""`with_model_size`: a plan made without the model's size (`auto_configure()` takes
none) completed with it, on hardware snapshots as plain data. It decides what `plan`
decides for the same request with ``params``: FSDP2 where a whole replica does not fit,
the plan's engine where it does, and the ``distribute`` asked for kept."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from accelkit.hardware.what_if import what_if
from accelkit.planning import Distribution, Plan, Request, lacks_model_size, plan, with_model_size
from accelkit.planning.keys import Key
from accelkit.planning.types import Framework, FrozenDtype, Optimizer, Status

TORCHRUN_2 = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}


def two_h100() -> Plan:
    return plan(what_if("H100", 2))


def test_an_8b_model_on_two_h100_is_sharded_where_the_plan_said_ddp() -> None:
    without = two_h100()
    assert without.distribution is Distribution.DDP and without.memory is None
    sized = with_model_size(without, Request(params=8e9))
    assert sized.distribution is Distribution.FSDP
    assert sized.value(Key.SHARDING) == "fsdp2"
    assert sized.memory is not None and sized.memory.choice.startswith("fsdp2")
    assert sized.memory.params == 8_000_000_000 and sized.memory.activations == "unknown"
    assert sized.get(Key.DDP_BUCKET_VIEW) is None  # DDP's own setting goes with it
    assert "FSDP2" in sized.get(Key.LAUNCH).reason
    assert sized == plan(what_if("H100", 2), Request(params=8e9))  # the planner's decision


def test_a_100m_model_stays_ddp_with_its_estimate() -> None:
    sized = with_model_size(two_h100(), Request(params=1e8))
    assert sized.distribution is Distribution.DDP
    assert sized.value(Key.SHARDING) == "ddp" and sized.memory.choice == "ddp"
    assert sized.get(Key.DDP_BUCKET_VIEW) is not None
    assert sized.settings[: len(two_h100().settings)] == two_h100().settings


@pytest.mark.parametrize(
    "planned",
    [
        pytest.param(lambda: plan(what_if("H100", 2), Request(params=1e8)), id="has-estimate"),
        pytest.param(lambda: plan(what_if(None)), id="cpu"),
        pytest.param(
            lambda: plan(what_if("H100", 2), Request(framework="tensorflow")), id="tensorflow"
        ),
        pytest.param(lambda: plan(what_if("H100", 2), Request(distribute="fsdp")), id="fsdp"),
    ],
)
def test_a_plan_with_nothing_to_lay_out_is_returned_unchanged(planned) -> None:
    given_plan = planned()
    assert not lacks_model_size(given_plan)
    assert with_model_size(given_plan, Request(params=8e9)) is given_plan


def test_a_plan_sharded_by_hand_is_kept() -> None:
    by_hand = dataclasses.replace(two_h100(), distribution=Distribution.FSDP)
    assert with_model_size(by_hand, Request(params=1e3)) is by_hand
    setting = plan(what_if("H100", 2), Request(params=1e3)).get(Key.SHARDING)
    written = two_h100().with_settings((*two_h100().settings, setting))
    assert with_model_size(written, Request(params=8e9)) is written


def test_without_params_the_plan_is_returned_unchanged() -> None:
    without = two_h100()
    assert with_model_size(without, Request()) is without


def test_ddp_asked_for_stays_ddp_and_the_estimate_says_it_does_not_fit() -> None:
    asked = plan(what_if("H100", 2), Request(distribute="ddp"))
    assert asked.requested_distribution is Distribution.DDP
    sized = with_model_size(asked, Request(params=8e9))
    assert sized.distribution is Distribution.DDP
    assert sized.memory is not None and not sized.memory.fits
    assert sized.value(Key.MEMORY) == "does not fit"


def test_none_asked_for_plans_one_gpu() -> None:
    asked = plan(what_if("H100", 2, environ=TORCHRUN_2), Request(distribute="none"))
    sized = with_model_size(asked, Request(params=1e8))
    assert sized.distribution is Distribution.NONE and sized.memory.gpus == 1
    assert sized.get(Key.TORCH_PROCESS_GROUP) is None


def test_the_requested_distribution_survives_the_plans_json() -> None:
    asked = plan(what_if("H100", 2), Request(distribute="ddp"))
    assert Plan.from_dict(asked.to_dict()).requested_distribution is Distribution.DDP
    assert "requested_distribution" not in two_h100().to_dict()  # auto: the JSON as it was


def test_settings_applied_before_keep_what_happened_to_them() -> None:
    launched = plan(what_if("H100", 2, environ=TORCHRUN_2))
    applied = launched.with_settings(
        s.with_status(Status.APPLIED, "test") for s in launched.settings
    )
    sized = with_model_size(applied, Request(params=8e9))
    group = sized.get(Key.TORCH_PROCESS_GROUP)
    assert group.status is Status.APPLIED and "FSDP2" in group.reason
    assert sized.get(Key.SHARDING).status is Status.PLANNED  # new: not applied yet
    assert [s.key for s in sized.settings][: len(launched.settings) - 1] == [
        s.key for s in launched.settings if s.key is not Key.DDP_BUCKET_VIEW
    ]


HARDWARE = {
    "2 x H100": lambda: what_if("H100", 2),
    "8 x H100 torchrun": lambda: what_if(
        "H100", 8, environ={**TORCHRUN_2, "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "8"}
    ),
    "1 x A100": lambda: what_if("A100", 1),
    "2 x RTX 4090": lambda: what_if("RTX 4090", 2),
    "4 x T4": lambda: what_if("Tesla T4", 4),
}
SNAPSHOTS = {name: build() for name, build in HARDWARE.items()}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    hardware=st.sampled_from(sorted(SNAPSHOTS)),
    distribute=st.sampled_from(["auto", "none", "ddp"]),
    params=st.integers(30, 130).map(lambda tenths: int(10 ** (tenths / 10))),  # 1e3 to 1e13
    trainable_share=st.sampled_from([1.0, 0.5, 0.01]),
    optimizer=st.sampled_from(list(Optimizer)),
    frozen=st.sampled_from(list(FrozenDtype)),
)
def test_it_decides_what_the_planner_decides_given_the_size(
    hardware, distribute, params, trainable_share, optimizer, frozen
) -> None:
    snapshot = SNAPSHOTS[hardware]
    try:
        without = plan(snapshot, Request(distribute=distribute))
    except ValueError:
        assume(False)  # "ddp" where no launch distributes (one GPU): refused by the planner
    size = {
        "params": params,
        "trainable_params": max(1, int(params * trainable_share)),
        "optimizer": optimizer,
        "frozen_dtype": frozen,
    }
    sized = with_model_size(without, Request(**size))
    assert sized == plan(snapshot, Request(distribute=distribute, **size))
    assert sized.framework is Framework.TORCH and sized.memory is not None
    if distribute != "auto":  # what was asked for is the engine
        assert sized.distribution is without.distribution
    elif sized.memory.choice.startswith("fsdp2") and without.distribution is Distribution.DDP:
        assert sized.distribution is Distribution.FSDP  # DDP gives way to FSDP2
    else:
        assert sized.distribution is without.distribution  # one process alone stays alone
