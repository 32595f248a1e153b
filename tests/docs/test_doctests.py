"""The docstring examples of every module under src/accelkit run, through `doctest`.

One test per docstring with examples (id: its dotted name), found by reading the
source (so collecting imports nothing), run in the module's namespace as
``pytest --doctest-modules src/accelkit`` runs them. A module whose import needs
a framework that is not installed (torch, TensorFlow, Lightning, transformers) is
skipped with that reason. What an example changes in the process (environment
variables, the current plan, the accelkit logger) is put back after it.
"""

from __future__ import annotations

import ast
import doctest
import importlib
import importlib.util
import io
import logging
import os
import re
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
_OPTIONAL = ("torch", "tensorflow", "keras", "lightning", "pytorch_lightning", "transformers")
# What an example needs besides its module (accelkit imports a framework only when
# called): what it imports; the framework a name in the module's path or the example
# says (accelkit.torch, flops_tensorflow, framework="torch"); the calibration's PyTorch.
_IMPORTS = re.compile(r"(?:>>>|\.\.\.)\s*(?:import|from)\s+([A-Za-z_]\w*)")
_NAMED = re.compile(r"torch|tensorflow|keras|lightning|accelkit\.hf\b")
_ALSO = {"accelkit.hf": "transformers", "accelkit.profiling.calibrate": "torch"}


@dataclass(frozen=True)
class Docstring:
    module: str
    name: str  # dotted, as doctest names it
    text: str
    path: Path
    line: int  # of the docstring's first line


def _modules() -> Iterator[tuple[str, Path]]:
    for path in sorted((SRC / "accelkit").rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        if parts[-1] == "__main__":  # importing it runs the CLI
            continue
        yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


def _docstrings(module: str, path: Path) -> Iterator[Docstring]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    parser = doctest.DocTestParser()

    def visit(node: ast.AST, name: str) -> Iterator[Docstring]:
        text = ast.get_docstring(node, clean=False)  # type: ignore[arg-type]
        if text and _has_examples(parser, text):
            line = node.body[0].lineno if node.body else 1  # type: ignore[attr-defined]
            yield Docstring(module, name, text, path, line)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            return  # doctest.DocTestFinder does not look inside functions
        for child in getattr(node, "body", []):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                yield from visit(child, f"{name}.{child.name}")

    yield from visit(tree, module)


def _has_examples(parser: doctest.DocTestParser, text: str) -> bool:
    try:
        return bool(parser.get_examples(text))
    except ValueError:  # a malformed example: collected, so that its test says what is wrong
        return True


_ALL = [d for module, path in _modules() for d in _docstrings(module, path)]


def _import(module: str) -> types.ModuleType:
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        missing = (error.name or "").split(".")[0]
        if missing in _OPTIONAL and importlib.util.find_spec(missing) is None:
            pytest.skip(f"{module} needs {missing}, which is not installed")
        raise


@pytest.fixture
def _process_state() -> Iterator[None]:
    """Put back what an example may change: the environment, the current plan, the
    accelkit logger, the framework flags a plan sets (torch's TF32 and cuDNN
    switches, the Keras policy), a process group left behind."""
    from accelkit import configure

    environ = dict(os.environ)
    plan = configure.current_plan()
    logger = logging.getLogger("accelkit")
    level, handlers, filters = logger.level, list(logger.handlers), list(logger.filters)
    flags = _framework_flags()
    grouped = _process_group()
    try:
        yield
    finally:
        if _process_group() and not grouped:  # an example that failed before destroying it
            sys.modules["torch"].distributed.destroy_process_group()
        os.environ.clear()
        os.environ.update(environ)
        configure.set_current_plan(plan)
        logger.setLevel(level)
        logger.handlers[:] = handlers
        logger.filters[:] = filters
        _restore_framework_flags(flags)


def _process_group() -> bool:
    distributed = getattr(sys.modules.get("torch"), "distributed", None)
    return bool(distributed and distributed.is_available() and distributed.is_initialized())


def _framework_flags() -> dict[str, object]:
    flags: dict[str, object] = {}
    if torch := sys.modules.get("torch"):
        matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
        if hasattr(matmul, "fp32_precision"):  # PyTorch >= 2.9: once these flags are set,
            # the legacy getters raise, so they are read and put back as they are
            flags["torch"] = (matmul.fp32_precision, cudnn.fp32_precision, cudnn.benchmark)
        else:
            flags["torch"] = (
                matmul.allow_tf32,
                cudnn.allow_tf32,
                cudnn.benchmark,
                torch.get_float32_matmul_precision(),
            )
    if keras := sys.modules.get("keras"):
        flags["keras"] = keras.mixed_precision.global_policy().name
    return flags


def _restore_framework_flags(flags: dict[str, object]) -> None:
    """Set back only what changed (torch warns about its older TF32 switches when set)."""
    now = _framework_flags()
    if "torch" in now and now["torch"] != flags.get("torch", now["torch"]):
        torch = sys.modules["torch"]
        saved: tuple = flags["torch"]  # type: ignore[assignment]
        if len(saved) == 3:
            matmul, cudnn, benchmark = saved
            torch.backends.cuda.matmul.fp32_precision = matmul
            torch.backends.cudnn.fp32_precision = cudnn
        else:
            matmul, cudnn, benchmark, precision = saved
            torch.set_float32_matmul_precision(precision)
            torch.backends.cuda.matmul.allow_tf32 = matmul
            torch.backends.cudnn.allow_tf32 = cudnn
        torch.backends.cudnn.benchmark = benchmark
    if "keras" in now and now["keras"] != flags.get("keras", "float32"):
        sys.modules["keras"].mixed_precision.set_global_policy(flags.get("keras", "float32"))


def _needed(docstring: Docstring) -> set[str]:
    """The optional modules `docstring`'s examples need."""
    found = set(_IMPORTS.findall(docstring.text)) & set(_OPTIONAL)
    found |= {_ALSO.get(n, n) for n in _NAMED.findall(f"{docstring.module} {docstring.text}")}
    if docstring.module in _ALSO:
        found.add(_ALSO[docstring.module])
    return found


@pytest.mark.usefixtures("_process_state")
@pytest.mark.parametrize("docstring", _ALL, ids=[d.name for d in _ALL])
def test_docstring_examples(docstring: Docstring) -> None:
    if missing := sorted(m for m in _needed(docstring) if importlib.util.find_spec(m) is None):
        pytest.skip(f"the examples need {', '.join(missing)}, not installed here")
    module = _import(docstring.module)
    test = doctest.DocTestParser().get_doctest(
        docstring.text,
        dict(module.__dict__),
        docstring.name,
        str(docstring.path),
        docstring.line - 1,
    )
    out = io.StringIO()
    runner = doctest.DocTestRunner(verbose=False)
    try:
        result = runner.run(test, out=out.write, clear_globs=True)
    finally:
        test.globs.clear()
    if result.failed:
        pytest.fail(
            f"{docstring.name}: {result.failed} of {result.attempted} examples failed\n"
            f"{out.getvalue()}",
            pytrace=False,
        )


def test_docstrings_found() -> None:
    """The walk sees the examples of the public entry points."""
    names = {d.name for d in _ALL}
    assert {"accelkit.configure.plan_for", "accelkit.planning.planner.plan"} <= names
