"""No rule fires without its evidence: the contract of `accelkit.advisor.rules.needs`.

For every registered rule: it declares its inputs; an example context fires it; the
same context missing any one required input never fires it (through the registry,
`advise`); its evidence names only keys it declared; and a key that states an optional
input appears only when that input is in the context.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from accelkit import plan_for, what_if
from accelkit.advisor import advise
from accelkit.advisor.context import Context
from accelkit.advisor.rules import FALLBACK, RULES, input_wait
from accelkit.advisor.rules.needs import declared, needs, present
from accelkit.hardware.info import HardwareInfo

from .helpers import measured_on

CPU = HardwareInfo(source="cpu", cpu_count=8)
A100, H200 = what_if("A100-SXM4-80GB"), what_if("H200")

# (hardware, plan, measurements) of a run that fires the rule
Example = tuple[HardwareInfo, Any, dict[str, Any]]


def _tuned(option: str, value: Any) -> dict[str, Any]:
    return {
        "decision": "tuned",
        "candidates": [
            {
                "name": "eager",
                "status": "baseline",
                "step_seconds": 0.030,
                "settings": {"compile": False, "optimizer": "default"},
            },
            {
                "name": option,
                "status": "slower",
                "step_seconds": 0.025,
                "settings": {"compile": False, "optimizer": "default", option: value},
            },
        ],
    }


def _dropped_cuda_graphs() -> dict[str, Any]:
    """A tune record whose CUDA-graph candidate failed its gradients check."""
    record = _tuned("cudagraphs", True)
    graphs = record["candidates"][1]
    graphs["settings"]["compile"] = True
    graphs.update(status="failed", step_seconds=None, why="gradients differ")
    graphs["check"] = {
        "loss_difference": 0.002,
        "loss_limit": 0.02,
        "grad_difference": 0.114,
        "grad_limit": 0.1,
        "failed": "gradients",
    }
    return record


def _autotune_unweighed() -> dict[str, Any]:
    """A tune record that kept compile and skipped max-autotune: the run's length unknown."""
    record = _tuned("compile", True)
    compiled = record["candidates"][1]
    compiled.update(name="compile", status="chosen", compile_seconds=40.0)
    record["candidates"].append(
        {"name": "max-autotune", "status": "skipped", "settings": {},
         "why": "the run's length is unknown (no steps= and no len(loader))"}
    )  # fmt: skip
    return record


def _dropped_sdpa() -> dict[str, Any]:
    """A tune record whose SDPA candidate failed its loss check against eager attention."""
    record = _tuned("attention", "sdpa")
    record["candidates"][1].update(
        status="failed",
        step_seconds=None,
        why="loss differs",
        check={"loss_difference": 0.05, "loss_limit": 0.02, "failed": "loss"},
    )
    return record


def _float8_slower() -> dict[str, Any]:
    """A tune record that kept compile and timed float8 on top of it, slower."""
    record = _tuned("compile", True)
    record["candidates"][1].update(name="compile", status="chosen", compile_seconds=40.0)
    record["candidates"].append(
        {"name": "compile+float8", "status": "slower", "step_seconds": 0.026,
         "settings": {"compile": True, "optimizer": "default", "float8": True},
         "paired_speedup": 0.96, "paired_spread": [0.94, 0.98], "against": "compile",
         "why": "not clearly faster"}
    )  # fmt: skip
    return record


_OPT = {
    "type": "AdamW",
    "implementation": "for-loop",
    "foreach_available": True,
    "fused_available": True,
    "set_by_user": False,
    "parameter_tensors": 148,
}
_FLOAT_ID = {
    "layer": "tpe",
    "embedding": "token_emb",
    "input_dim": 20000,
    "input": "ids",
    "input_dtype": "float32",
    "input_shape": [200],
    "cast_by": "tpe",
    "cast_dtype": "float16",
}
_RANKS = [
    {"rank": 0, "step_time_s": 0.10, "input_wait_share": 0.02},
    {"rank": 1, "step_time_s": 0.16, "input_wait_share": 0.30},
]

EXAMPLES: dict[str, Callable[[], Example]] = {
    "float_ids": lambda: (
        CPU,
        None,
        measured_on(
            CPU,
            framework="tensorflow",
            facts={
                "keras_policy": "mixed_float16",
                "float_id_inputs": [_FLOAT_ID],
                "ids_over_float16": {"input": "ids", "max_id": 19999, "changed": 90, "values": 100},
            },
        ),
    ),
    "half_ids": lambda: (
        CPU,
        None,
        measured_on(
            CPU,
            facts={
                "half_integer_inputs": [
                    {"input": "input_ids", "dtype": "bfloat16", "shape": [8, 128], "max": 19968.0}
                ]
            },
        ),
    ),
    "float16_outputs": lambda: (
        CPU,
        None,
        measured_on(
            CPU,
            framework="tensorflow",
            facts={"keras_policy": "mixed_float16", "float16_outputs": ["logits"]},
        ),
    ),
    "unscaled_train_step": lambda: (
        CPU,
        None,
        measured_on(
            CPU,
            framework="tensorflow",
            facts={
                "keras_policy": "mixed_float16",
                "custom_train_step": {"model_class": "VAE", "scales_loss": False},
            },
        ),
    ),
    "nonfinite_loss": lambda: (
        A100,
        None,
        measured_on(
            A100,
            precision="fp16",
            losses=[2.3, float("nan")],
            facts={
                "first_nonfinite_loss_step": 40,
                "loss_scale": {"initial": 65536.0, "history": [[20, 2.0]]},
            },
        ),
    ),
    "loss_scale": lambda: (
        A100,
        None,
        measured_on(
            A100,
            precision="fp16",
            facts={"loss_scale": {"initial": 65536.0, "history": [[50, 32.0], [100, 0.5]]}},
        ),
    ),
    "input_bound": lambda: (
        H200,
        None,
        measured_on(
            H200,
            input_wait_share=0.5,
            step_time_s=0.02,
            facts={"loader": {"type": "DataLoader", "num_workers": 0, "pin_memory": False}},
        ),
    ),
    "evaluation_time": lambda: (
        CPU,
        None,
        measured_on(
            CPU,
            run_seconds=100.0,
            training_seconds=60.0,
            evaluation_seconds=37.0,
            eval_losses=[0.9, 0.7, 0.6, 0.55],
        ),
    ),
    "other_time": lambda: (
        H200,
        None,
        measured_on(
            H200,
            run_seconds=100.0,
            training_seconds=70.0,
            other_seconds=30.0,
            epochs=10,
            facts={"loader": {"type": "DataLoader", "num_workers": 4}},
        ),
    ),
    "launch_overhead": lambda: (
        A100,
        None,
        measured_on(
            A100,
            gpu_utilization=40.0,
            input_wait_share=0.02,
            step_time_s=0.004,
            facts={"batch_size": 100, "compiled": False},
        ),
    ),
    "compile": lambda: (
        H200,
        None,
        measured_on(
            H200,
            mfu=0.126,
            input_wait_share=0.01,
            step_time_s=0.112,
            flops_per_step=1e12,
            facts={"compiled": False},
        ),
    ),
    "compile, tuned": lambda: (
        H200,
        None,
        measured_on(
            H200, step_time_s=0.03, facts={"compiled": False}, tuning=_tuned("compile", True)
        ),
    ),
    "cuda_graphs": lambda: (
        H200,
        None,
        measured_on(
            H200,
            gpu_utilization=58.0,
            step_time_s=0.024,
            input_wait_share=0.01,
            facts={"compiled": False},
            tuning=_dropped_cuda_graphs(),
        ),
    ),
    "cuda_graphs, not tuned": lambda: (
        H200,
        None,
        measured_on(H200, gpu_utilization=58.0, step_time_s=0.024, facts={"compiled": False}),
    ),
    "max_autotune": lambda: (
        H200,
        None,
        measured_on(H200, steady_seconds=7200.0, tuning=_autotune_unweighed()),
    ),
    "sdpa_attention": lambda: (
        H200,
        None,
        measured_on(
            H200,
            facts={
                "attention": [{"model": "GPT2LMHeadModel", "implementation": "eager", "sdpa": True}]
            },
            tuning=_dropped_sdpa(),
        ),
    ),
    "sdpa_attention, not tuned": lambda: (
        CPU,
        None,
        measured_on(
            CPU,
            facts={
                "attention": [{"model": "GPT2LMHeadModel", "implementation": "eager", "sdpa": True}]
            },
        ),
    ),
    "float8": lambda: (H200, None, measured_on(H200, precision="bf16", tuning=_float8_slower())),
    "float8, not tuned": lambda: (
        H200,
        plan_for("H200"),
        measured_on(
            H200,
            facts={
                "layers": [
                    {
                        "name": "up",
                        "type": "Linear",
                        "dims": {"in_features": 2048, "out_features": 8192},
                    },
                    {
                        "name": "head",
                        "type": "Linear",
                        "dims": {"in_features": 2048, "out_features": 32000},
                    },
                ]
            },
        ),
    ),
    "fused_optimizer": lambda: (
        H200,
        None,
        measured_on(
            H200,
            facts={"optimizer": _OPT, "parameter_bytes": 5e8},
            tuning=_tuned("optimizer", "fused"),
        ),
    ),
    "precision": lambda: (
        A100,
        plan_for("A100-SXM4-80GB", precision="fp32"),
        measured_on(A100, mfu=0.3),
    ),
    "precision_bf16": lambda: (
        A100,
        plan_for("A100-SXM4-80GB", precision="fp16"),
        measured_on(A100, facts={"loss_scale": {"initial": 65536.0, "history": [[10, 1024.0]]}}),
    ),
    "keras_policy": lambda: (
        A100,
        None,
        measured_on(
            A100,
            framework="tensorflow",
            mfu=0.3,
            facts={
                "keras_policy": "mixed_float16",
                "keras_matmul_layers": 4,
                "keras_layers_off_policy": [
                    {"name": "d", "type": "Dense", "compute_dtype": "float32"}
                ],
            },
        ),
    ),
    "memory_headroom": lambda: (
        A100,
        None,
        measured_on(
            A100,
            peak_memory_bytes=8e9,
            gpu_utilization=95.0,
            facts={"batch_size": 32, "model_state_bytes": 1e9},
        ),
    ),
    "memory_pressure": lambda: (
        A100,
        None,
        measured_on(
            A100, peak_memory_bytes=78e9, facts={"batch_size": 32, "model_state_bytes": 1e9}
        ),
    ),
    "memory_prediction": lambda: (
        A100,
        None,
        measured_on(
            A100,
            peak_memory_bytes=30e9,
            facts={"predicted_memory_bytes": 20e9, "memory_choice": "ddp"},
        ),
    ),
    "alignment": lambda: (
        A100,
        None,
        measured_on(
            A100,
            facts={
                "batch_size": 100,
                "layers": [
                    {"name": "emb", "type": "Embedding", "dims": {"num_embeddings": 50257}},
                    {
                        "name": "head",
                        "type": "Linear",
                        "dims": {"in_features": 512, "out_features": 1001},
                    },
                ],
            },
        ),
    ),
    "idle_gpus": lambda: (
        what_if("A100-SXM4-80GB", 4),
        None,
        measured_on(what_if("A100-SXM4-80GB", 4), world_size=1, facts={"devices_used": 1}),
    ),
    "data_parallel": lambda: (A100, None, measured_on(A100, facts={"data_parallel": True})),
    "scaling": lambda: (
        what_if("A100-SXM4-80GB", 2),
        None,
        measured_on(
            what_if("A100-SXM4-80GB", 2),
            world_size=2,
            scaling_efficiency=0.6,
            global_samples_per_second=120.0,
            single_device_samples_per_second=100.0,
            ranks=_RANKS,
            slowest_rank=1,
            facts={"batch_size": 32},
        ),
    ),
    "no_ecc": lambda: (
        what_if("RTX 4090"),
        None,
        measured_on(what_if("RTX 4090"), facts={"run_seconds": 7200}),
    ),
    "low_mfu": lambda: (H200, None, measured_on(H200, mfu=0.12, step_time_s=0.05)),
}
_RULE_OF = {
    "compile, tuned": "compile",
    "cuda_graphs, not tuned": "cuda_graphs",
    "sdpa_attention, not tuned": "sdpa_attention",
    "float8, not tuned": "float8",
    "precision_bf16": "precision",
    "memory_headroom": "memory",
    "memory_pressure": "memory",
}
_ALL = [*RULES, *FALLBACK]


def _rule(example: str) -> Callable[..., Any]:
    name = _RULE_OF.get(example, example)
    found = [r for r in _ALL if r.__name__ == name or _fires(r) == name]
    assert found, f"no registered rule for example {example!r}"
    return found[0]


def _fires(rule: Callable[..., Any]) -> str:
    """The advice id each rule gives, where it differs from the function's name."""
    return {"torch_compile": "compile", "where_to_look": "low_mfu"}.get(
        rule.__name__, rule.__name__
    )


def _advise(rule: Callable[..., Any], example: Example) -> list[Any]:
    hardware, plan, m = example
    if rule in FALLBACK:
        return advise(hardware, plan, m, rules=[], fallback=[rule])
    return advise(hardware, plan, m, rules=[rule], fallback=[])


def _rename(hardware: HardwareInfo, m: dict[str, Any], **gpu: Any) -> Example:
    gpus = tuple(dataclasses.replace(g, **gpu) for g in hardware.gpus)
    hardware = dataclasses.replace(hardware, gpus=gpus)
    m["hardware"] = hardware.to_dict()
    return hardware, m


def without(example: Example, name: str) -> Example:
    """`example` with input `name` taken away, as a run that lacked it would be."""
    hardware, plan, m = copy.deepcopy(example)
    if name.startswith("figure:"):
        m.pop(name[len("figure:") :], None)
    elif name.startswith("fact:"):
        m["facts"].pop(name[len("fact:") :], None)
    elif name == "tuning":
        m.pop("tuning", None)
    elif name == "plan":
        plan = None
        m.pop("plan", None)
    elif name == "batch_size":
        m["facts"].pop("batch_size", None)
        m.pop("batch_size", None)
    elif name in ("gpu", "measured_here"):
        m.update(device="cpu", hardware={})
        if name == "gpu":
            hardware, plan = CPU, None
    elif name == "compute_capability":
        hardware, m = _rename(
            hardware, m, name="Mystery GPU", compute_capability=None, architecture=None
        )
    elif name == "spec":
        hardware, m = _rename(hardware, m, name="Mystery GPU")
    return hardware, plan, m


def _ids(advice: list[Any]) -> list[str]:
    return [a.id for a in advice]


def test_every_registered_rule_declares_its_inputs_and_has_an_example() -> None:
    assert all(declared(rule) is not None for rule in _ALL), [
        r.__name__ for r in _ALL if declared(r) is None
    ]
    covered = {_rule(example) for example in EXAMPLES}
    assert covered == set(_ALL), [r.__name__ for r in set(_ALL) - covered]


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_the_example_fires_its_rule(example: str) -> None:
    assert example.split(",", maxsplit=1)[0] in _ids(_advise(_rule(example), EXAMPLES[example]()))


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_a_context_missing_any_required_input_never_fires_the_rule(example: str) -> None:
    rule, full = _rule(example), EXAMPLES[example]()
    for entry in declared(rule).required:
        group = (entry,) if isinstance(entry, str) else entry
        lacking = full
        for name in group:
            lacking = without(lacking, name)
        ctx = Context.build(*lacking)
        assert not any(present(ctx, n) for n in group), f"{group} still in the context"
        assert _advise(rule, lacking) == [], f"{example} fired without {group}"


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_evidence_names_only_declared_inputs_and_only_when_present(example: str) -> None:
    rule, full = _rule(example), EXAMPLES[example]()
    declaration = declared(rule)
    cases = [("", full)] + [(name, without(full, name)) for name in declaration.optional]
    for removed, case in cases:
        ctx = Context.build(*case)
        if removed and present(ctx, removed):
            continue  # this example cannot lack it (a CPU run is always measured here)
        for advice in _advise(rule, case):
            for key in advice.evidence:
                source = declaration.stated(key)
                assert source is not False, f"{advice.id}: evidence {key!r} is not declared"
                sources = (source,) if isinstance(source, str) else source or ()
                assert not sources or any(present(ctx, s) for s in sources), (
                    f"{advice.id}: evidence {key!r} states {sources} without it "
                    f"(removed {removed!r})"
                )


def test_the_registry_does_not_call_a_rule_missing_its_input() -> None:
    @needs("fact:loader")
    def loud(ctx: Context) -> None:
        raise AssertionError("called without its input")

    assert advise(CPU, None, measured_on(CPU), rules=[loud], fallback=[]) == []


def test_a_meter_run_without_a_loader_says_nothing_about_its_workers() -> None:
    """Issue 13, item 20: a `Meter` never sees the loader, yet the verdict said
    "num_workers is 0" and bounded the gain as if it were."""
    m = measured_on(H200, input_wait_share=0.5, step_time_s=0.02)  # no loader fact
    found = input_wait.input_bound(Context.build(H200, None, m))
    assert "num_workers is 0" not in found.action
    assert "not recorded" in found.action and "loader_facts(loader)" in found.action
    assert "not recorded" in found.expected_gain
    assert not any(key.startswith("loader.") for key in found.evidence)
    keras = input_wait.input_bound(
        Context.build(CPU, None, measured_on(CPU, framework="tensorflow", input_wait_share=0.5))
    )
    assert "not recorded" in keras.action
