"""The version helper reads what frameworks report (local builds, nightlies, vendor builds,
nonsense) and the floor check refuses only what is known to be too old."""

from __future__ import annotations

import sys
import types

import pytest
from hypothesis import given
from hypothesis import strategies as st
from packaging.version import Version

import accelkit
from accelkit import configure
from accelkit.hardware.info import HardwareInfo
from accelkit.utils import imports, versions
from accelkit.utils.versions import FLOORS, at_least, parse, too_old

# What frameworks put in __version__ and their metadata, and what accelkit must make of it.
REPORTED = [
    ("2.5.0+cu121", (2, 5, 0), True),  # a CUDA wheel from the PyTorch index
    ("2.13.0+cpu", (2, 13, 0), True),
    ("2.13.0.dev20260101", (2, 13, 0), True),  # a nightly
    ("2.3.0a0+40ec155e58.nv24.03", (2, 3, 0), True),  # an NGC container's build of 2.3
    ("2.3.0.dev20240301+cu121", (2, 3, 0), True),  # a nightly of the floor release
    ("2.3", (2, 3), True),
    ("2.2.2", (2, 2, 2), False),
    ("2.1.0+rocm5.6", (2, 1, 0), False),
    ("1.13.1", (1, 13, 1), False),
    ("10.0", (10, 0), True),
]


@pytest.mark.parametrize(("reported", "release", "meets"), REPORTED)
def test_reported_versions_parse_and_compare_by_release(reported, release, meets) -> None:
    assert parse(reported).release == release
    assert at_least(reported, "2.3") is meets


@pytest.mark.parametrize("reported", ["unknown", "", "   ", "N/A", "2.x", "git", None, object()])
def test_a_version_that_names_no_release_is_unknown_not_too_old(reported) -> None:
    assert parse(reported) is None
    assert at_least(reported, "2.3") is None
    assert too_old("torch", reported) is None


_RELEASES = st.lists(st.integers(0, 40), min_size=1, max_size=4).map(tuple)
_SUFFIXES = st.sampled_from(["", "a0", "rc1", ".dev20260101", ".post1", "a0.dev3"])
_LOCALS = st.sampled_from(["", "+cu121", "+cpu", "+rocm6.2", "+40ec155e58.nv24.03", "+git1a2b3c"])


@given(_RELEASES, _SUFFIXES, _LOCALS, _RELEASES)
def test_any_build_of_a_release_compares_as_that_release(release, suffix, local, floor) -> None:
    reported = ".".join(map(str, release)) + suffix + local
    floor_text = ".".join(map(str, floor))
    assert parse(reported).release == release
    assert at_least(reported, floor_text) is (_padded(release) >= _padded(floor))


def _padded(release: tuple[int, ...]) -> tuple[int, ...]:
    return release + (0,) * (4 - len(release))


@given(st.text(max_size=40))
def test_any_text_parses_to_a_version_or_none_and_never_raises(text) -> None:
    parsed = parse(text)
    assert parsed is None or isinstance(parsed, Version)
    assert at_least(text, "2.3") in (True, False, None)
    assert too_old("torch", text) is None or "accelkit supports" in too_old("torch", text)


@pytest.mark.parametrize("name", sorted(FLOORS))
def test_too_old_names_the_version_the_floor_and_the_api_that_sets_it(name) -> None:
    floor = FLOORS[name]
    below = f"{int(floor.release.split('.')[0]) - 1}.99.0"
    message = too_old(name, below)
    assert message is not None
    assert below in message and f">= {floor.release}" in message and floor.api in message
    assert too_old(name, floor.release) is None
    assert too_old(name, f"{floor.release}.0.dev20990101+cu999") is None


def test_too_old_has_nothing_to_say_of_a_module_without_a_floor() -> None:
    assert too_old("transformers", "0.1") is None


def test_too_old_reads_the_installed_version_when_none_is_given(monkeypatch) -> None:
    monkeypatch.setattr(versions, "installed", lambda name: "2.0.1" if name == "torch" else None)
    assert "torch 2.0.1" in too_old("torch")
    assert too_old("keras") is None  # not installed: nothing to say


def _fake_module(monkeypatch, name: str, version: str | None) -> None:
    module = types.ModuleType(name)
    if version is not None:
        module.__version__ = version
    monkeypatch.setitem(sys.modules, name, module)


def test_require_refuses_a_framework_older_than_the_floor_with_the_upgrade_command(
    monkeypatch,
) -> None:
    _fake_module(monkeypatch, "keras", "2.15.0")  # Keras 2, as TensorFlow 2.15 installs it
    with pytest.raises(ImportError) as raised:
        imports.require("keras")
    message = str(raised.value)
    assert "keras 2.15.0" in message and f">= {FLOORS['keras'].release}" in message
    assert "pip install -U 'accelkit[tensorflow]'" in message


@pytest.mark.parametrize(
    "version", ["3.15.1", f"{FLOORS['keras'].release}.0.dev2025+local", "unknown", None]
)
def test_require_returns_a_framework_that_is_recent_enough_or_of_unknown_version(
    monkeypatch, version
) -> None:
    monkeypatch.setattr(versions, "installed", lambda name: None)  # metadata says nothing
    _fake_module(monkeypatch, "keras", version)
    assert imports.require("keras") is sys.modules["keras"]


def test_auto_configure_applies_nothing_to_a_framework_too_old_and_says_why(monkeypatch) -> None:
    monkeypatch.setattr(configure, "is_available", lambda name: True)
    monkeypatch.setattr(versions, "installed", lambda name: "2.1.2" if name == "torch" else None)
    plan = accelkit.auto_configure(framework="torch", hardware=HardwareInfo(), verbose=False)
    assert plan.not_applied.startswith("torch 2.1.2 is older than accelkit supports")
    assert "pip install -U 'accelkit[torch]'" in plan.not_applied
