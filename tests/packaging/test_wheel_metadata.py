"""The wheel a user installs carries its licence and its extras (issue 25): the Apache
License 2.0 text that pyproject.toml's ``license`` names, and ``accelkit[lightning]``
and ``accelkit[hf]`` for the trainer integrations, each with PyTorch at accelkit's floor."""

from __future__ import annotations

import email.parser
import hashlib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from accelkit.utils.versions import FLOORS

ROOT = Path(__file__).resolve().parents[2]
# The canonical https://www.apache.org/licenses/LICENSE-2.0.txt.
APACHE_2_0_MD5 = "3b83ef96387f14655fc854ddc3c6bd57"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    build = pytest.importorskip("build", reason="the dev extras install `build`")
    if not hasattr(build, "ProjectBuilder"):  # a folder named build/ on sys.path, not it
        pytest.skip("the `build` package is not installed (the dev extras install it)")
    out = tmp_path_factory.mktemp("dist")
    # Without isolation: the build backend installed here (setuptools), no download.
    path = build.ProjectBuilder(ROOT).build("wheel", out)
    with zipfile.ZipFile(path) as opened:
        yield opened


def _dist_info(wheel: zipfile.ZipFile, name: str) -> bytes:
    [path] = [
        n
        for n in wheel.namelist()
        if n.split("/", 1)[0].endswith(".dist-info") and n.endswith("/" + name)
    ]
    return wheel.read(path)


def _metadata(wheel: zipfile.ZipFile) -> email.message.Message:
    return email.parser.BytesParser().parsebytes(_dist_info(wheel, "METADATA"))


def test_the_license_file_is_the_apache_2_0_text_and_ships_in_the_wheel(wheel) -> None:
    text = (ROOT / "LICENSE").read_bytes()
    assert hashlib.md5(text).hexdigest() == APACHE_2_0_MD5
    assert _dist_info(wheel, "licenses/LICENSE") == text
    metadata = _metadata(wheel)
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata.get_all("License-File") == ["LICENSE"]


@pytest.mark.parametrize(
    ("extra", "needs"),
    [("lightning", {"lightning"}), ("hf", {"transformers", "accelerate"})],
)
def test_the_integration_extras_bring_their_trainer_and_torch(wheel, extra, needs) -> None:
    metadata = _metadata(wheel)
    assert extra in metadata.get_all("Provides-Extra")
    brought = {}
    for text in metadata.get_all("Requires-Dist"):
        requirement = Requirement(text)
        if requirement.marker and requirement.marker.evaluate({"extra": extra}):
            brought[requirement.name] = requirement
    assert needs <= set(brought), brought
    assert all(brought[name].specifier for name in needs), brought  # each with a floor
    # PyTorch through accelkit[torch]: its floor written once, at FLOORS.
    assert brought["accelkit"].extras == {"torch"}
    torch_floor = [
        Requirement(t) for t in metadata.get_all("Requires-Dist") if Requirement(t).name == "torch"
    ]
    assert [str(r.specifier) for r in torch_floor] == [f">={FLOORS['torch'].release}"]
