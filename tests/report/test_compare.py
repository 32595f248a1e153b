"""`accelkit.compare`: real CPU fits compared with each other, and plain-data reports made
from them (a slower run, a figure not measured, another framework, GPU or schema)."""

from __future__ import annotations

import copy
import json

import pytest

pytest.importorskip("torch")

import accelkit
from accelkit.report.comparison import Verdict, compare
from accelkit.report.comparison.figures import BY_NAME, verdict
from accelkit.report.comparison.text import render_comparison

from .compare_runs import report, scaled, steady, torch_run, write


def test_a_run_against_itself_differs_in_nothing() -> None:
    result = accelkit.compare(report(torch_run()), report(torch_run()))
    assert result.changes == ()
    assert result.advice_appeared == () and result.advice_gone == ()
    assert {f.verdict for f in result.figures} == {Verdict.WITHIN_NOISE}
    step = result.figure("step_time_s")
    assert step is not None and step.base_range is not None  # several windows: a spread
    assert step.base_range[0] <= step.base <= step.base_range[1]


def test_a_wider_model_on_larger_batches_shows_what_changed() -> None:
    result = compare(report(torch_run()), report(torch_run(width=256, batch=64)))
    changed = {(c.group, c.name): (c.base, c.new) for c in result.changes}
    assert changed[("shapes", "batch size")] == ("32", "64")
    assert changed[("model", "parameters")] == ("1,348", "5,380")
    assert changed[("shapes", "matmul layers")] == ("2: 16x64, 64x4", "2: 16x256, 256x4")
    assert ("model", "FLOPs per step") in changed
    assert not any(c.group in ("hardware", "software") for c in result.changes)


def test_paths_are_loaded_and_advised_again(tmp_path) -> None:
    data = torch_run()
    data["advice"] = [{"id": "gone_rule", "severity": "info", "title": "an old rule"}]
    base = write(data, str(tmp_path), "base.json")
    result = compare(base, write(torch_run(), str(tmp_path), "new.json"))
    assert result.base == base
    assert "gone_rule" not in {a.id for a in result.advice_gone}  # the current rules ran


def test_advice_that_appeared_and_went_away() -> None:
    base, new = torch_run(), torch_run()
    base["advice"] = [{"id": "input_bound", "title": "input-bound"}]
    new["advice"] = [{"id": "use_bf16", "title": "use bf16"}]
    result = compare(report(base), report(new))
    assert [(a.id, a.title) for a in result.advice_appeared] == [("use_bf16", "use bf16")]
    assert [a.id for a in result.advice_gone] == ["input_bound"]


def test_a_run_slower_beyond_its_windows_is_slower() -> None:
    base = steady(torch_run(), 0.01)
    result = compare(report(base), report(scaled(base, 3.0)))
    step, rate = result.figure("step_time_s"), result.figure("samples_per_second")
    assert step is not None and step.verdict is Verdict.SLOWER
    assert step.change == pytest.approx(2.0)
    assert rate is not None and rate.verdict is Verdict.SLOWER
    assert result.slower_by_more_than(0.05) and not result.slower_by_more_than(2.5)
    assert compare(report(scaled(base, 3.0)), report(base)).figure("step_time_s").verdict is (
        Verdict.FASTER
    )


def test_a_small_change_inside_the_windows_is_within_noise() -> None:
    base = steady(torch_run(), 0.05)
    result = compare(report(base), report(scaled(base, 1.08)))  # windows overlap
    assert result.figure("step_time_s").verdict is Verdict.WITHIN_NOISE
    assert not result.slower_by_more_than(0.0)


def test_a_figure_one_run_did_not_measure_is_not_compared_and_says_why() -> None:
    base, new = torch_run(), torch_run()
    base["step_time_s"] = None
    base["notes"]["step_time_s"] = "the run was interrupted in warm-up"
    new["peak_memory_bytes"] = 2_000_000_000
    result = compare(report(base), report(new))
    step, memory = result.figure("step_time_s"), result.figure("peak_memory_bytes")
    assert step is not None and step.verdict is Verdict.NOT_COMPARED
    assert step.why == "not measured in BASE: the run was interrupted in warm-up"
    assert memory is not None and memory.why.startswith("not measured in BASE")
    assert not result.slower_by_more_than(0.0)
    assert "not measured in BASE" in render_comparison(result, 100)


def test_other_framework_gpu_and_schema_compare_as_far_as_they_go(tmp_path) -> None:
    new = torch_run()
    new.update(framework="tensorflow", world_size=2, schema="accelkit.run_report/2")
    new["a_field_from_the_future"] = {"x": 1}
    new["hardware"]["gpus"] = [{"index": 0, "name": "NVIDIA H200"}]
    new["hardware"]["driver_version"] = "570.86"
    new["versions"] = {**new["versions"], "tensorflow": "2.20.0"}
    result = compare(
        write(torch_run(), str(tmp_path), "a.json"), write(new, str(tmp_path), "b.json")
    )
    caveats = " ".join(result.caveats)
    assert "BASE ran torch and NEW tensorflow" in caveats
    assert "accelkit.run_report/2" in caveats and "different GPUs" in caveats
    changed = {(c.group, c.name): (c.base, c.new) for c in result.changes}
    assert changed[("hardware", "GPU")] == ("no NVIDIA GPU", "1 x NVIDIA H200")
    assert changed[("hardware", "driver")] == (None, "570.86")
    assert changed[("software", "tensorflow")] == (None, "2.20.0")
    assert result.figure("step_time_s").verdict is Verdict.WITHIN_NOISE


def test_a_run_without_windows_has_unknown_noise() -> None:
    base = torch_run()
    lone = copy.deepcopy(base)
    lone["series"] = {}
    result = compare(report(lone), report(scaled(base, 1.5)))
    assert result.figure("step_time_s").base_range is None
    assert any("BASE has fewer than two windows of step time" in c for c in result.caveats)


@pytest.mark.parametrize(
    ("base_range", "new_range", "new", "found"),
    [
        ((0.09, 0.11), (0.105, 0.13), 0.12, Verdict.WITHIN_NOISE),  # ranges overlap
        ((0.099, 0.101), (0.119, 0.121), 0.12, Verdict.SLOWER),
        ((0.05, 0.101), (0.119, 0.121), 0.12, Verdict.WITHIN_NOISE),  # BASE's spread is 50%
        (None, None, 0.12, Verdict.SLOWER),  # no windows: any difference counts
        ((0.099, 0.101), (0.079, 0.081), 0.08, Verdict.FASTER),
    ],
)
def test_the_noise_rule(base_range, new_range, new, found) -> None:
    assert verdict(BY_NAME["step_time_s"], 0.1, new, base_range, new_range)[0] is found


def test_figures_that_are_not_a_speed_are_higher_or_lower() -> None:
    memory = BY_NAME["peak_memory_bytes"]
    assert verdict(memory, 1e9, 2e9, None, None)[0] is Verdict.HIGHER
    assert verdict(memory, 2e9, 1e9, None, None)[0] is Verdict.LOWER


def test_the_result_is_frozen_plain_data() -> None:
    base = steady(torch_run())
    result = compare(report(base), report(scaled(base, 2.0)))
    document = json.loads(json.dumps(result.to_dict()))
    assert document["figures"][0]["name"] == "step_time_s"
    assert document["figures"][0]["verdict"] == "slower"
    with pytest.raises(AttributeError):
        result.base = "x"  # type: ignore[misc]


def test_a_keras_run_compares_with_a_torch_run() -> None:
    pytest.importorskip("keras")
    from ..helpers import keras_models
    from ..helpers.keras_models import classification_data

    with keras_models.global_policy_kept():
        x, y = classification_data(512)
        keras_run = accelkit.keras.fit(keras_models.mlp(), x, y, epochs=2, batch_size=32, verbose=0)
    result = compare(report(torch_run()), keras_run)
    assert any("NEW tensorflow" in c or "NEW keras" in c for c in result.caveats), result.caveats
    assert result.figure("step_time_s").verdict is not Verdict.NOT_COMPARED
    assert ("run", "framework") in {(c.group, c.name) for c in result.changes}
    render_comparison(result, 100)
