"""`write_atomic`, which writes every file accelkit writes (issue 25, D09 and D11): whole
or not at all, with the mode `open(path, "w")` would give, never over what is not a
regular file."""

from __future__ import annotations

import os
import stat

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelkit.utils.files import write_atomic


@pytest.fixture
def umask():
    """Set the umask for one test, and put the runner's back after it."""
    saved = os.umask(0o022)
    yield os.umask
    os.umask(saved)


@settings(max_examples=30, deadline=None)
@given(mask=st.integers(0, 0o777))
def test_a_new_file_gets_the_mode_the_umask_gives(tmp_path_factory, mask) -> None:
    path = tmp_path_factory.mktemp("new") / "run.json"
    saved = os.umask(mask)
    try:
        write_atomic(path, "{}\n")
    finally:
        os.umask(saved)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask
    assert path.read_text() == "{}\n"


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o600, 0o664])
def test_a_replaced_file_keeps_its_mode(tmp_path, umask, mode) -> None:
    umask(0o077)  # a private umask must not narrow a file the team already reads
    path = tmp_path / "run.json"
    path.write_text("old\n")
    path.chmod(mode)
    write_atomic(path, "new\n")
    assert stat.S_IMODE(path.stat().st_mode) == mode and path.read_text() == "new\n"


def _fifo(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    return tmp_path / "fifo"


def _link_to_fifo(tmp_path):
    os.symlink(_fifo(tmp_path), tmp_path / "link")
    return tmp_path / "link"


def _device(tmp_path):
    try:
        os.mknod(tmp_path / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("making a device node needs root")
    return tmp_path / "null"


def _folder(tmp_path):
    (tmp_path / "folder").mkdir()
    return tmp_path / "folder"


@pytest.mark.parametrize("make", [_fifo, _link_to_fifo, _device, _folder])
def test_what_is_not_a_regular_file_is_refused_and_left_as_it_was(tmp_path, make) -> None:
    path = make(tmp_path)
    before = os.lstat(path)
    with pytest.raises(OSError, match="not a regular file") as error:
        write_atomic(path, "{}\n")
    assert str(path) in str(error.value)
    after = os.lstat(path)
    assert (after.st_mode, after.st_ino, after.st_rdev) == (
        before.st_mode,
        before.st_ino,
        before.st_rdev,
    )
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".accelkit-")]


def test_a_failed_write_leaves_the_earlier_file_and_no_temporary(tmp_path, monkeypatch) -> None:
    path = tmp_path / "page.html"
    path.write_text("the earlier page\n")

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("accelkit.utils.files.os.replace", disk_full)
    with pytest.raises(OSError, match="No space left"):
        write_atomic(path, "the new page\n")
    assert path.read_text() == "the earlier page\n"
    assert [p.name for p in tmp_path.iterdir()] == ["page.html"]
