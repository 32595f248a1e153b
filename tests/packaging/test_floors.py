"""pyproject.toml declares the floors the code checks, without upper caps; every runtime
dependency it declares is imported, and every third-party import is declared or optional;
docs/compatibility.md states the same floors."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from accelkit.utils.versions import FLOORS

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest brings tomli there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "accelkit"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
FRAMEWORK_EXTRAS = ("torch", "tensorflow")
# The module each runtime distribution is imported as.
MODULE_OF = {
    "nvidia-ml-py": "pynvml",
    "packaging": "packaging",
    "typing-extensions": "typing_extensions",
}
# Imported only in the framework and integration homes (tests/test_architecture.py), and
# installed with the framework or by the user: never needed by `import accelkit`.
OPTIONAL = {
    "torch",
    "torchvision",
    "tensorflow",
    "keras",
    "numpy",
    "transformers",
    "timm",
    "torchao",
}


def _requirements(*groups: str) -> dict[str, Requirement]:
    texts = PROJECT["dependencies"] if not groups else []
    for group in groups:
        texts = [*texts, *PROJECT["optional-dependencies"][group]]
    return {Requirement(text).name: Requirement(text) for text in texts}


def _floor(requirement: Requirement) -> str:
    [specifier] = requirement.specifier  # one specifier: a floor, no cap
    assert specifier.operator == ">=", f"{requirement}: a floor (>=), no cap or pin"
    return specifier.version


def test_the_framework_extras_declare_exactly_the_floors_the_code_checks() -> None:
    declared = {name: _floor(r) for name, r in _requirements(*FRAMEWORK_EXTRAS).items()}
    assert declared == {name: floor.release for name, floor in FLOORS.items()}


@pytest.mark.parametrize("name", sorted(MODULE_OF))
def test_each_runtime_dependency_has_a_floor_and_is_imported(name) -> None:
    requirement = _requirements()[name]
    assert _floor(requirement)
    assert MODULE_OF[name] in _third_party_imports(), f"{name} is declared but never imported"


def test_runtime_dependencies_are_the_ones_listed_here() -> None:
    assert set(_requirements()) == set(MODULE_OF)


def test_every_third_party_import_is_declared_or_optional() -> None:
    undeclared = _third_party_imports() - set(MODULE_OF.values()) - OPTIONAL
    assert not undeclared, f"imported by src/accelkit but not declared: {sorted(undeclared)}"


def _third_party_imports() -> set[str]:
    found = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - {"accelkit", "__future__"}


def test_the_compatibility_page_states_each_declared_floor() -> None:
    """docs/compatibility.md's table: | `name` | floor | ... |"""
    page = (ROOT / "docs" / "compatibility.md").read_text()
    stated = dict(re.findall(r"^\|\s*`([\w-]+)`\s*\|\s*([\d.]+)\s*\|", page, re.MULTILINE))
    declared = {
        name: _floor(requirement)
        for name, requirement in {**_requirements(), **_requirements(*FRAMEWORK_EXTRAS)}.items()
    }
    assert {name: stated.get(name) for name in declared} == declared
