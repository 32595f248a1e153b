"""Guards over every verdict the rules can give (issue 37): each `do:` snippet is code
whose names are bound, and no sentence contradicts its own figures.

The contexts are `test_rule_needs.EXAMPLES` (one per rule and branch) and the variants
below (the other framework, the loader's kinds, a tuned run, a capped batch).

What a snippet may use without defining it (`PLACEHOLDERS`): an action is a fragment of
the user's training script, so it may name what that script has by docs/advice.md's
convention: its modules imported as usual, the framework classes it imports by name, and
its own objects (the model, the loader, the optimizer ...). ``<what>`` marks a value to
fill in and reads as ``...``. Anything else a snippet loads it must bind itself (an
assignment, ``with ... as name``, a comprehension) before use, in the order the action
gives its fragments.
"""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Iterator
from typing import Any

import pytest

from accelkit import plan_for, what_if
from accelkit.advisor import Advice, advise
from accelkit.hardware.info import HardwareInfo

from .helpers import measured_on
from .test_rule_needs import EXAMPLES, Example

PLACEHOLDERS = {
    # modules, imported as scripts import them
    "torch", "nn", "tf", "keras", "accelkit", "itertools",
    # classes imported by name: torch.utils.data.DataLoader, DistributedDataParallel,
    # Lightning's Trainer and ModelCheckpoint, transformers' TrainingArguments and
    # AutoModelForCausalLM, Keras callbacks, accelkit's trainer callback
    "DataLoader", "DistributedDataParallel", "Trainer", "ModelCheckpoint",
    "TrainingArguments", "AutoModelForCausalLM", "BackupAndRestore", "TensorBoard",
    "AccelkitCallback",
    # the script's own objects
    "model", "loader", "dataset", "optimizer", "loss_fn", "batch", "loss", "inputs",
    "device", "dtype", "plan", "tokenizer", "name", "path", "step", "local_rank",
    "val_set", "val_loader", "eval_dataset", "fn", "block", "x", "d", "n", "N", "B",
    "forward_and_loss", "backup_dir", "meter",
    # inside a Keras train_step: the model and its GradientTape
    "self", "tape",
}  # fmt: skip
_CPU = HardwareInfo(source="cpu", cpu_count=8)
_H200, _A100 = what_if("H200"), what_if("A100-SXM4-80GB")


def _loader_run(framework: str, loader: dict[str, Any] | None, share: float = 0.3) -> Example:
    facts = {} if loader is None else {"loader": loader}
    return _H200, None, measured_on(_H200, framework=framework, input_wait_share=share,
                                    step_time_s=0.02, facts=facts)  # fmt: skip


def _graphs_kept() -> dict[str, Any]:
    return {"decision": "tuned", "candidates": [
        {"name": "eager", "status": "baseline", "step_seconds": 0.03, "settings": {}},
        {"name": "compile+cudagraphs", "status": "chosen", "step_seconds": 0.021,
         "settings": {"compile": True, "cudagraphs": True}}]}  # fmt: skip


VARIANTS: dict[str, Any] = {
    "input, 6% wait": lambda: _loader_run("torch", {"type": "DataLoader"}, 0.057),
    "input, unseen": lambda: _loader_run("torch", None),
    "input, workers": lambda: _loader_run(
        "torch", {"type": "DataLoader", "num_workers": 64, "batch_size": 32}
    ),
    "input, other loader": lambda: _loader_run("torch", {"type": "MyLoader"}),
    "input, TensorDataset": lambda: _loader_run(
        "torch", {"type": "DataLoader", "dataset": "TensorDataset", "batch_size": 64}
    ),
    "input, tf unseen": lambda: _loader_run("tensorflow", None),
    "input, tf.data no map": lambda: _loader_run("tensorflow", {"type": "tf.data.Dataset"}),
    "input, tf.data map": lambda: _loader_run(
        "tensorflow", {"type": "tf.data.Dataset", "map": True, "prefetch": True, "cache": True}
    ),
    "input, tf serial map": lambda: _loader_run(
        "tensorflow", {"type": "tf.data.Dataset", "map": True}, 0.05
    ),
    "input, PyDataset": lambda: _loader_run("tensorflow", {"type": "PyDataset"}),
    "input, arrays": lambda: _loader_run("tensorflow", {"type": "ndarray"}),
    "launch, small idle": lambda: (_H200, None, measured_on(
        _H200, gpu_utilization=65.0, input_wait_share=0.02, step_time_s=0.004,
        facts={"batch_size": 64, "compiled": True})),
    "launch, graphs kept": lambda: (_H200, None, measured_on(
        _H200, gpu_utilization=43.0, input_wait_share=0.01, step_time_s=0.021,
        facts={"batch_size": 64}, tuning=_graphs_kept())),
    "launch, keras": lambda: (_H200, None, measured_on(
        _H200, framework="tensorflow", gpu_utilization=40.0, step_time_s=0.004)),
    "low_mfu, cpu": lambda: (_CPU, None, measured_on(_CPU, mfu_calibrated=0.1)),
    "low_mfu, keras": lambda: (_A100, None, measured_on(
        _A100, framework="tensorflow", mfu=0.1, precision="bf16", matmul_dtype="bf16")),
    "memory, capped": lambda: (_H200, None, measured_on(
        _H200, peak_memory_bytes=int(1.87e9), facts={"batch_size": 64})),
    "memory, keras": lambda: (_A100, None, measured_on(
        _A100, framework="tensorflow", peak_memory_bytes=8e9, facts={"batch_size": 32})),
    "memory pressure, keras": lambda: (_A100, None, measured_on(
        _A100, framework="tensorflow", peak_memory_bytes=78e9, facts={"batch_size": 32})),
    "phases, keras": lambda: (_CPU, None, measured_on(
        _CPU, framework="tensorflow", run_seconds=100.0, training_seconds=40.0,
        evaluation_seconds=30.0, other_seconds=30.0)),
    "phases, unseen loader": lambda: (_CPU, None, measured_on(
        _CPU, run_seconds=100.0, training_seconds=70.0, other_seconds=30.0)),
    "no_ecc, keras": lambda: (what_if("RTX 4090"), None, measured_on(
        what_if("RTX 4090"), framework="tensorflow", facts={"run_seconds": 7200})),
    "precision, keras": lambda: (_A100, plan_for("A100-SXM4-80GB", precision="fp32",
                                                 framework="tensorflow"),
                                 measured_on(_A100, framework="tensorflow", mfu=0.3)),
}  # fmt: skip


def _every_advice() -> Iterator[tuple[str, Advice]]:
    for name, example in {**EXAMPLES, **VARIANTS}.items():
        hardware, plan, m = example()
        for advice in advise(hardware, plan, m):
            yield f"{name}: {advice.id}", advice


_ADVICE = sorted(dict(_every_advice()).items())

# -- snippets -------------------------------------------------------------------------

_START = re.compile(
    r"(?<![\w.'\"])(?P<with>with )?(?P<target>[A-Za-z_]\w*(?:, [A-Za-z_]\w*)* = )?"
    r"(?P<head>[A-Za-z_][\w.]*[(]|(?<=[\s(])[.][A-Za-z_]\w*[(]|(?<== )[{\[])"
)
_CHAIN = re.compile(r"[.][A-Za-z_]\w*|(?=[(\[])")
_AS = re.compile(r" as (?P<name>[A-Za-z_]\w*):?")
_CLOSE = {"(": ")", "[": "]", "{": "}"}


def _balanced(text: str, at: int) -> int:
    """The index after the bracket that closes the one at `at` (strings skipped)."""
    depth, quote = 0, ""
    for i in range(at, len(text)):
        c = text[i]
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c in _CLOSE:
            depth += 1
        elif c in _CLOSE.values():
            depth -= 1
            if depth == 0:
                return i + 1
    raise AssertionError(f"unbalanced brackets from {text[at : at + 60]!r}")


def _chained(text: str, end: int) -> int:
    """`end` moved past `.name`, `(...)` and `[...]` that continue the expression."""
    while (m := _CHAIN.match(text, end)) and end < len(text):
        if m.group(0):
            end = m.end()
        elif text[end] in "([":
            end = _balanced(text, end)
        else:
            break
    return end


def snippets(action: str) -> list[str]:
    """The code in an action's text, in order: calls (with their chained calls), with
    their assignment or ``with ... as`` when written, a line that starts with ``.map(``
    continuing a ``dataset``; ``<what>`` reads as ``...``."""
    found, at = [], 0
    while m := _START.search(action, at):
        end = _chained(action, _balanced(action, m.end("head") - 1))
        expr = action[m.start("head") : end]
        expr = "dataset" + expr if expr.startswith(".") else expr
        expr = re.sub(r"<[A-Za-z][^<>]*>", "...", (m.group("target") or "") + expr)
        if m.group("with"):
            bound = _AS.match(action, end)
            expr = f"with {expr}{' as ' + bound['name'] if bound else ''}:\n    pass"
            end = bound.end() if bound else end
        found.append(expr)
        at = end
    return found


def _names(tree: ast.AST, ctx: type) -> set[str]:
    stored = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ctx)}
    return stored | {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)}


def unbound(action: str) -> list[str]:
    """Names the action's snippets load that nothing binds: not a builtin, not a
    placeholder, not assigned by an earlier (or the same) snippet."""
    bound, missing = set(PLACEHOLDERS) | set(dir(builtins)), []
    for code in snippets(action):
        try:
            tree = ast.parse(code)
        except SyntaxError as error:
            raise AssertionError(f"not Python: {code!r} ({error.msg})") from error
        bound |= _names(tree, ast.Store)
        missing += sorted(_names(tree, ast.Load) - bound)
    return missing


def test_the_snippet_reader_finds_what_it_should() -> None:
    action = (
        "profile: with torch.profiler.profile(x) as p: ... p.step() per step; then "
        "prof.key_averages().table(sort_by='a')\n  .map(fn, n=<larger>)"
    )
    assert snippets(action) == [
        "with torch.profiler.profile(x) as p:\n    pass",
        "p.step()",
        "prof.key_averages().table(sort_by='a')",
        "dataset.map(fn, n=...)",
    ]
    assert unbound(action) == ["prof"]


def test_every_rule_is_covered() -> None:
    from accelkit.advisor.rules import FALLBACK, RULES

    ids = {advice.id for _, advice in _ADVICE}
    assert len(ids) >= len(RULES) + len(FALLBACK) - 3, ids


@pytest.mark.parametrize(("where", "advice"), _ADVICE, ids=[w for w, _ in _ADVICE])
def test_every_snippet_parses_and_binds_its_names(where: str, advice: Advice) -> None:
    assert unbound(advice.action) == [], advice.action


# -- figures --------------------------------------------------------------------------

_FIGURE = re.compile(r"(?:(?P<q>up to|at most|at least|about) )?(?P<n>\d+(?:\.\d+)?)x\b")


def sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])|\n", text) if s.strip()]


def contradictions(text: str) -> list[str]:
    """Sentences whose speed-up figures disagree: two different upper bounds ("up to",
    "at most") of the one figure, an estimate ("about") above a bound, a lower bound
    ("at least") above an upper one."""
    bad = []
    for sentence in sentences(text):
        figures: dict[str, list[float]] = {"up to": [], "at most": [], "at least": [], "about": []}
        for m in _FIGURE.finditer(sentence):
            if m["q"]:
                figures[m["q"]].append(float(m["n"]))
        upper = figures["up to"] + figures["at most"]
        if len(set(upper)) > 1 or any(
            low > min(upper) for low in figures["at least"] + figures["about"] if upper
        ):
            bad.append(sentence)
    return bad


def test_the_figure_check_catches_the_issues_sentence() -> None:
    assert contradictions("up to 1.06x: 1 / (1 - 0.057) = 1.06x if removed, at most 3.00x: w")
    assert not contradictions("up to 3.00x: 1 / (1 - 0.9) = 10.00x if removed, at most 3.00x")
    assert not contradictions("about 1.39x: r = 86%; at most 1.48x. Not measured: 2x")


@pytest.mark.parametrize(("where", "advice"), _ADVICE, ids=[w for w, _ in _ADVICE])
def test_every_sentence_agrees_with_its_own_figures(where: str, advice: Advice) -> None:
    for text in (advice.title, advice.action, advice.expected_gain or ""):
        assert contradictions(text) == [], text
