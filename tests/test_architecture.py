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
import re
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


def test_no_module_is_over_400_lines() -> None:
    long = {m: n for m, p in MODULES.items() if (n := len(p.read_text().splitlines())) > 400}
    assert not long


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
