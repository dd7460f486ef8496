"""Writing a whole file so that a failure never leaves it half-written: `write_atomic`.

The new content goes into a temporary file in the same folder, which is flushed to disk (`fsync`)
and then renamed over the target (`os.replace`, atomic on POSIX): on a full disk, a quota or a crash
the target keeps its old content, whole. The target's permission bits are kept; a new file gets
0666 less the umask, or 0600 when it holds conversation text (`private=True`). A target that is a
symlink is followed (the link stays, its file is replaced); one that is not a regular file (a FIFO,
a device, a folder) is refused: writing into a FIFO blocks until someone reads it. Standard library only.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path

__all__ = ["NotRegularFile", "file_kind", "write_atomic"]

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISREG, "a regular file"))


class NotRegularFile(OSError):
    """The target exists and is not a regular file; `strerror` names what it is ("a FIFO (named pipe)")."""


def file_kind(mode: int) -> str:
    """What a file of `st_mode` `mode` is, for messages: "a directory", "a FIFO (named pipe)" … "a regular file"."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def write_atomic(path: str | os.PathLike[str], data: bytes, *, private: bool = False) -> Path:
    """Replace the file at `path` by `data`, whole or not at all; returns the path written (symlinks resolved).

    Args:
        path: the file; its folder must exist.
        data: the complete new content.
        private: a new file is created 0600 (and an existing one loses its group and other bits).

    Raises:
        NotRegularFile: `path` exists and is a folder, FIFO, socket or device (nothing is written).
        OSError: the write failed (no space, no permission…); the target is unchanged.
    """
    target = Path(os.path.realpath(path))
    try:
        info: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        info = None
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise NotRegularFile(errno.EINVAL, file_kind(info.st_mode), str(path))
    temp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.crow-tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0),
                 0o600 if private else 0o666)
    try:
        if info is not None:
            os.fchmod(fd, stat.S_IMODE(info.st_mode) & (0o700 if private else 0o7777))
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(temp, target)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    with contextlib.suppress(OSError):  # the rename itself reaches the disk (best effort)
        folder = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
    return target
