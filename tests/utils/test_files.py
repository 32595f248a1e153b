"""`write_atomic`, which writes every file accelkit writes (issue 25, D09 and D11): whole
or not at all, with the mode `open(path, "w")` would give, never over what is not a
regular file."""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile

import pytest
from hypothesis import assume, given, settings
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


def _as_unprivileged(probe, *args):
    """`probe(*args)` as an unprivileged user, its result: in a child that drops to
    uid 65534 when the tests run as root (root writes whatever the mode says)."""
    if os.geteuid() != 0:
        return probe(*args)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            os.close(read)
            os.setgid(65534)
            os.setuid(65534)
            os.write(write, json.dumps(probe(*args)).encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as answer:
        return json.loads(answer.read())


def _try_both(mode: int) -> dict[str, object]:
    """Whether open(path, "a") and write_atomic may write a file of `mode` the caller
    owns, and what is left of it and its folder."""
    folder = tempfile.mkdtemp(prefix="accelkit-mode-")
    try:
        path = os.path.join(folder, "baseline.json")
        with open(path, "w") as out:
            out.write("old\n")
        os.chmod(path, mode)
        try:
            open(path, "a").close()
            plain = None
        except PermissionError as error:
            plain = error.filename
        try:
            write_atomic(path, "new\n")
            atomic = None
        except PermissionError as error:
            atomic = error.filename
        kept = stat.S_IMODE(os.stat(path).st_mode)
        os.chmod(path, 0o600)
        with open(path) as written:
            text = written.read()
        left = sorted(os.listdir(folder))
        return {
            "path": path,
            "plain": plain,
            "atomic": atomic,
            "text": text,
            "left": left,
            "mode": kept,
        }
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@settings(max_examples=25, deadline=None)
@given(mode=st.integers(0o400, 0o777))
def test_a_file_the_caller_may_not_write_is_refused_as_open_refuses_it(mode) -> None:
    """Faults4 E03: the rename needs only the folder's permission; a report its owner
    made read-only must be refused as open(path, "w") refuses it, and left as it was."""
    seen = _as_unprivileged(_try_both, mode)
    assert seen["atomic"] == seen["plain"]  # refused exactly when open refuses, naming path
    if seen["plain"] is None:
        assert seen["text"] == "new\n" and seen["mode"] == mode
    else:
        assert seen["plain"] == seen["path"] and seen["text"] == "old\n"
    assert seen["left"] == ["baseline.json"]


@settings(max_examples=40, deadline=None)
@given(
    hops=st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=3),
    exists=st.booleans(),
)
def test_a_symlink_is_written_through_and_kept(tmp_path_factory, hops, exists) -> None:
    """Faults4 E03: `latest.json -> runs/run42.json` stays a link, and the file it points
    to gets the text, as open(path, "w") gives it; each hop relative or absolute, in its
    own folder or not, the last file there or not yet."""
    root = tmp_path_factory.mktemp("links")
    target = root / "runs" / "run42.json"
    target.parent.mkdir()
    if exists:
        target.write_text("old\n")
        target.chmod(0o640)
    links, pointed = [], target
    for depth, (absolute, in_folder) in enumerate(hops):
        link = (root / f"d{depth}" if in_folder else root) / f"latest{depth}.json"
        link.parent.mkdir(exist_ok=True)
        os.symlink(pointed if absolute else os.path.relpath(pointed, link.parent), link)
        links.append((link, os.readlink(link)))
        pointed = link
    write_atomic(pointed, "new\n")
    assert all(os.path.islink(link) and os.readlink(link) == to for link, to in links)
    assert target.read_text() == "new\n" and pointed.read_text() == "new\n"
    assert stat.S_IMODE(target.stat().st_mode) == (0o640 if exists else 0o666 & ~_mask())
    assert not list(root.rglob(".accelkit-*"))


def _mask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@settings(max_examples=40, deadline=None)
@given(
    missing=st.lists(st.text("abcxyz-_.0", min_size=1, max_size=6), min_size=1, max_size=3),
    name=st.text("abcxyz-_0", min_size=1, max_size=8),
)
def test_a_missing_folder_is_named_by_the_callers_path(tmp_path_factory, missing, name) -> None:
    """Faults4 E18: the error names the path the caller gave, not accelkit's temporary file."""
    assume(all(part not in (".", "..") for part in missing))
    path = tmp_path_factory.mktemp("gone").joinpath(*missing, name + ".json")
    with pytest.raises(FileNotFoundError) as error:
        write_atomic(path, "{}\n")
    assert error.value.filename == str(path) and ".accelkit-" not in str(error.value)
    assert str(path) in str(error.value)
