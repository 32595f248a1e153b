"""The package reads in the order of its flow, and each concept has one home.

hardware -> planning -> frameworks/configure -> profiling -> advisor -> report,
with the user-facing packages (accelkit.torch, accelkit.keras, bench, cli) on
top. A module imports only from its own stage or the stages before it, at
module level or inside a function, without exception: what a plan or a run report
offers from a later stage (its table, its HTML page, a plan's PyTorch helpers) is
given to it by `accelkit/__init__.py` (docs/architecture.md).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "accelkit"

STAGES = [
    ("accelkit._version", "accelkit.utils"),
    ("accelkit.hardware", "accelkit.specs"),
    ("accelkit.planning",),
    ("accelkit.frameworks", "accelkit.configure"),
    ("accelkit.profiling",),
    ("accelkit.advisor",),
    ("accelkit.report",),
    (
        "accelkit.torch",
        "accelkit.keras",
        "accelkit.lightning",
        "accelkit.hf",
        "accelkit.bench",
        "accelkit.dispatch",
        "accelkit.cli",
        "accelkit.__main__",
        "accelkit",
    ),
]

# Where a framework may be imported (lazily everywhere: `import accelkit` imports none).
FRAMEWORK_HOMES = (
    "accelkit.torch",
    "accelkit.keras",
    "accelkit.lightning",
    "accelkit.hf",
    "accelkit.frameworks.torch_adapter",
    "accelkit.frameworks.torch_precision",
    "accelkit.frameworks.tensorflow_adapter",
    "accelkit.frameworks.keras_train_step",
    "accelkit.profiling.flops_",
    "accelkit.profiling.calibrate",
    "accelkit.bench",
    "accelkit.utils.imports",
)
FRAMEWORKS = ("torch", "tensorflow", "keras", "lightning", "pytorch_lightning")


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def _stage(module: str) -> int:
    for index, prefixes in enumerate(STAGES):
        for prefix in prefixes:
            if module == prefix or (prefix != "accelkit" and module.startswith(prefix + ".")):
                return index
    raise AssertionError(f"{module} belongs to no stage: add it to STAGES")


def _imports(module: str) -> list[tuple[str, int]]:
    """(imported module, line) for every import in `module`, relative ones resolved."""
    tree = ast.parse(MODULES[module].read_text())
    package = module if MODULES[module].name == "__init__.py" else module.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            names = [f"{base}.{alias.name}" for alias in node.names]
            # `from accelkit.x import y` imports accelkit.x.y when y is a module.
            found += [(n if n in MODULES else base, node.lineno) for n in names]
    return found


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_flow_down_the_stages(module) -> None:
    stage = _stage(module)
    for imported, line in _imports(module):
        if not imported.startswith("accelkit") or imported == "accelkit._version":
            continue
        if _stage(imported) > stage:
            pytest.fail(
                f"{module}:{line} imports {imported}, a later stage ({_stage(imported)} > {stage})"
            )


@pytest.mark.parametrize("module", sorted(MODULES))
def test_frameworks_are_imported_only_in_their_homes(module) -> None:
    if module.startswith(FRAMEWORK_HOMES):
        return
    for imported, line in _imports(module):
        assert imported.split(".")[0] not in FRAMEWORKS, f"{module}:{line} imports {imported}"


MAX_FUNCTION_LINES = 60  # STYLE.md 18: a function does one thing and reads on one screen


def test_no_function_is_over_60_lines_of_code() -> None:
    """A file holds one idea whatever its length; a function reads on one screen: at most
    60 lines of code in its body, not counting its docstring, blank lines and comments."""
    long = {
        f"{module}:{node.lineno} {node.name}": n
        for module, path in MODULES.items()
        for node, n in _function_lengths(path.read_text())
        if n > MAX_FUNCTION_LINES
    }
    assert not long, f"over {MAX_FUNCTION_LINES} lines of code: {long}"


def _function_lengths(text: str) -> Iterator[tuple[ast.FunctionDef | ast.AsyncFunctionDef, int]]:
    """Each function in `text` and the lines of code of its body (nested functions
    included), without its docstring, blank lines and comment-only lines."""
    code = {
        line
        for token in tokenize.generate_tokens(io.StringIO(text).readline)
        if token.type not in _NOT_CODE
        for line in range(token.start[0], token.end[0] + 1)
    }
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body[1:] if ast.get_docstring(node, clean=False) is not None else node.body
            if body:
                yield node, len(code & set(range(body[0].lineno, (node.end_lineno or 0) + 1)))


_NOT_CODE = {
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENDMARKER,
}


@pytest.mark.parametrize(
    ("pattern", "home"),
    [
        (r"\(\s*[78]\s*,\s*[09]\s*\)", "accelkit.hardware.capabilities"),  # tensor-core thresholds
        (r"[\"']mixed_(b?float16)[\"']", "accelkit.hardware.capabilities"),  # Keras policy names
        (r"fp32_precision", "accelkit.hardware.capabilities"),  # PyTorch >= 2.9's TF32 flags
        (r"[\"']ACCELKIT_[A-Z_]+[\"']", "accelkit.hardware.environment"),  # accelkit's variables
        (r"environ(\.get)?\(?\[?[\"']RANK[\"']", "accelkit.hardware.environment"),  # the rank
    ],
)
def test_each_concept_is_written_in_one_module(pattern, home) -> None:
    where = {m for m, p in MODULES.items() if re.search(pattern, _code(p.read_text()))}
    assert where <= {home}, f"{pattern} outside {home}: {sorted(where - {home})}"


def _code(text: str) -> str:
    """The source without docstrings and comments (examples there may name anything)."""
    tree = ast.parse(text)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(getattr(body[0], "value", None), ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            body[0] = ast.Pass()
    return "\n".join(line.split("#", 1)[0] for line in ast.unparse(tree).splitlines())
