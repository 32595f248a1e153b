"""Writing a file whole or not at all, as a reader of it expects.

Every file accelkit writes (a run report's JSON, its HTML page) goes through
`write_atomic`: the text goes to a temporary file beside the target, then is renamed
over it, so an error leaves the earlier file as it was and a reader never sees a
partial one. Otherwise it behaves as a plain ``open(path, "w")`` would: the new file
gets the mode the old one had, or the umask's; a file the caller may not write
(``chmod 444``) is refused with PermissionError, though the rename would need only the
folder's permission; a symlink is written through, its target replaced and the link
kept; an error names `path`, never the temporary file. What is not a regular file (a
FIFO, a device, a directory, a symlink to one) is refused rather than replaced by one.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
import threading

_UMASK_LOCK = threading.Lock()  # reading the umask sets it for a moment
# open() is refused by the effective uid's rights; os.access asks for the real uid's
_EFFECTIVE_IDS = os.access in os.supports_effective_ids


def write_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write `text` (UTF-8) to `path`: to a temporary file in its folder, then renamed over it.

    A symlink at `path` is written through: the file it points to is replaced (the
    temporary file sits in that file's folder) and the link stays.

    Raises:
        PermissionError: the file at `path` may not be written by this process (as
            ``open(path, "w")`` would say), or its folder may not be written.
        OSError: `path` is not a regular file (a FIFO, a device, a directory, a symlink
            to one), or the file could not be written; the error names `path` and the
            earlier file is untouched.

    Example:
        >>> write_atomic("run.html", "<html></html>\\n")  # doctest: +SKIP
    """
    given = os.fspath(path)
    try:
        target = os.path.realpath(given)
        _replace(target, text, _mode_for(target, given))
    except OSError as error:
        raise _naming(error, given) from None


def _replace(target: str, text: str, mode: int) -> None:
    """Write `text` to a temporary file in `target`'s folder, then rename it over `target`."""
    handle, temporary = tempfile.mkstemp(
        prefix=".accelkit-", suffix=".tmp", dir=os.path.dirname(target)
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


def _mode_for(target: str, given: str) -> int:
    """The permission bits for `target` (`given` with its symlinks resolved): those of
    the regular file there, else 0o666 less the umask (mkstemp's own 0o600 would hide
    a report from the rest of a team).

    Raises:
        OSError: `target` is not a regular file.
        PermissionError: this process may not write the file at `target`.
    """
    try:
        found = os.stat(target)
    except FileNotFoundError:
        return 0o666 & ~_umask()
    if not stat.S_ISREG(found.st_mode):
        raise OSError(
            f"{given} is not a regular file ({_kind(found.st_mode)}): not replaced; "
            "write to a file path"
        )
    if not os.access(target, os.W_OK, effective_ids=_EFFECTIVE_IDS):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), given)
    return stat.S_IMODE(found.st_mode)


def _naming(error: OSError, given: str) -> OSError:
    """`error` naming `given`, as ``open(given, "w")`` would have, not the temporary
    file or the symlink's target it came from; an error without an errno is kept."""
    if error.errno is None:
        return error
    return OSError(error.errno, error.strerror, given)  # OSError() picks the subclass


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
