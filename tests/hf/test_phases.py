"""Evaluation, checkpoints and logging are not training, in the Hugging Face door: the
training figures of a `Trainer` run that evaluates every 2 steps are those of the same
run without evaluation, and no input-bound verdict comes of it.

"The same run without evaluation" is the same run, in alternate stretches: on a loaded
2-core machine two runs one after the other differ by up to 2x (other processes come
and go), while neighbouring stretches of one run see the same machine. A callback after
``DefaultFlowCallback`` lets the Trainer evaluate (``eval_steps=2``) and save in every
other block of `BLOCK` steps only; the log closing each block gives that block's
figures, and each block that evaluated is compared with the block after it.

Python's garbage collector is off meanwhile: it runs when allocations pile up, and an
evaluation allocates enough to run the collections that the training steps after it
would otherwise pay (their blocks ran about 5% faster), an effect of evaluating, not of
measuring.
"""

from __future__ import annotations

import gc
import statistics

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate", reason="the Trainer needs accelerate")
pytestmark = pytest.mark.torch

from accelkit.hf import AccelkitCallback

from ..helpers.torch_data import CPU_PLAN
from .runs import trainer

BLOCK, BLOCKS = 6, 32


class _EveryOtherBlock(transformers.TrainerCallback):
    """Evaluation after steps 2 and 4 of the even blocks (32 held-out rows: about as long
    as 3 training steps each), a checkpoint after step 4; none in the odd blocks."""

    def on_step_end(self, args, state, control, **_):
        block, at = divmod(state.global_step - 1, BLOCK)
        breaks = block % 2 == 0 and at + 1 in (2, 4)
        control.should_evaluate = control.should_evaluate and breaks
        control.should_save = control.should_save and breaks and at + 1 == 4


def _paired_blocks(log_history) -> list[tuple[float, float]]:
    """The logged training samples/s of each block that evaluated and of the block after
    it (from the third block: the first holds the warm-up)."""
    logged = [
        entry["accelkit/samples_per_second"]
        for entry in log_history
        if "loss" in entry and entry["step"] > 2 * BLOCK
    ]
    return list(zip(logged[::2], logged[1::2], strict=False))


@pytest.fixture
def _no_garbage_collection():
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.usefixtures("_no_garbage_collection")
def test_evaluation_every_2_steps_leaves_the_training_figures_as_without(tmp_path) -> None:
    callback = AccelkitCallback(plan=CPU_PLAN)
    run = trainer(
        tmp_path,
        callback,
        max_steps=BLOCK * BLOCKS,
        logging_steps=BLOCK,
        eval_strategy="steps",
        eval_steps=2,
        eval_rows=32,
        save_strategy="steps",
        save_steps=2,
    )
    run.add_callback(_EveryOtherBlock())
    with callback:
        run.train()
    pairs = _paired_blocks(run.state.log_history)
    assert len(pairs) == BLOCKS // 2 - 1
    ratio = statistics.median(evaluated / after for evaluated, after in pairs)
    report = callback.report
    phases = (report.evaluation_seconds, report.other_seconds, report.run_seconds)
    assert 0.9 <= ratio <= 1.1, f"training samples/s x{ratio:.3f} when evaluating; {pairs}"
    assert report.evaluation_share > 0.2, phases
    assert report.other_seconds > 0, phases  # the checkpoints, the logging
    assert report.training_seconds + report.evaluation_seconds + report.other_seconds == (
        pytest.approx(report.run_seconds)
    )
    assert report.input_wait_share < 0.2
    assert "input_bound" not in {item["id"] for item in report.advice}


def test_an_evaluation_before_the_first_step_is_evaluation(tmp_path) -> None:
    callback = AccelkitCallback(plan=CPU_PLAN, warmup=0, flops_per_step=1e6)
    run = trainer(tmp_path, callback, max_steps=4, eval_on_start=True, eval_rows=32)
    with callback:
        run.train()
    report = callback.report
    assert report.evaluation_seconds > 0
    assert report.training_seconds + report.evaluation_seconds + report.other_seconds == (
        pytest.approx(report.run_seconds)
    )
