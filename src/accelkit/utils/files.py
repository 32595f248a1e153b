"""Writing a file whole or not at all, as a reader of it expects.

Every file accelkit writes (a run report's JSON, its HTML page) goes through
`write_atomic`: the text goes to a temporary file beside the target, then is renamed
over it, so an error leaves the earlier file as it was and a reader never sees a
partial one. The new file gets the mode the old one had, or the umask's, as a plain
``open(path, "w")`` would give it; what is not a regular file (a FIFO, a device, a
directory, a symlink to one) is refused rather than replaced by one.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import threading

_UMASK_LOCK = threading.Lock()  # reading the umask sets it for a moment


def write_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write `text` (UTF-8) to `path`: to a temporary file in its folder, then renamed over it.

    Raises:
        OSError: `path` is not a regular file (a FIFO, a device, a directory, a symlink
            to one), or the file could not be written; the earlier file is untouched.

    Example:
        >>> write_atomic("run.html", "<html></html>\\n")  # doctest: +SKIP
    """
    target = os.fspath(path)
    mode = _mode_for(target)
    handle, temporary = tempfile.mkstemp(
        prefix=".accelkit-", suffix=".tmp", dir=os.path.dirname(os.path.abspath(target))
    )
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            os.fchmod(out.fileno(), mode)
            out.write(text)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def _mode_for(target: str) -> int:
    """The permission bits for `target`: those of the regular file there, else 0o666
    less the umask (mkstemp's own 0o600 would hide a report from the rest of a team)."""
    try:
        found = os.stat(target)  # follows a symlink: its target must be a regular file
    except FileNotFoundError:
        return 0o666 & ~_umask()
    if not stat.S_ISREG(found.st_mode):
        raise OSError(
            f"{target} is not a regular file ({_kind(found.st_mode)}): not replaced; "
            "write to a file path"
        )
    return stat.S_IMODE(found.st_mode)


def _umask() -> int:
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def _kind(mode: int) -> str:
    kinds = {
        stat.S_ISDIR: "a directory",
        stat.S_ISFIFO: "a FIFO",
        stat.S_ISCHR: "a character device",
        stat.S_ISBLK: "a block device",
        stat.S_ISSOCK: "a socket",
    }
    return next((name for test, name in kinds.items() if test(mode)), "not a plain file")
