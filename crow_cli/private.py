"""Folders and files only their owner can read: what crow keeps holds tool output (file contents,
environment dumps), so the folders it creates are 0700 and its files 0600, like `~/.ssh`.

A folder that already existed keeps its mode (`~/.local/share` is shared with every other program);
a file of crow's own that others could read (made by an older crow) loses its group and other bits.
Standard library only.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

__all__ = ["open_private", "private_dir", "private_file"]


def private_dir(path: Path) -> Path:
    """Create `path` and each missing parent with mode 0700 (less the umask); returns `path`.

    Folders that exist are left as they are.

    Raises:
        OSError: a folder cannot be created (or a file stands in the way).
    """
    missing: list[Path] = []
    folder = path
    while not folder.is_dir():
        missing.append(folder)
        if folder.parent == folder:
            break
        folder = folder.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            if not folder.is_dir():
                raise
    return path


def open_private(path: Path) -> BinaryIO:
    """`path` opened for writing from its start (truncated), created 0600 if missing; an existing file of
    ours loses its group and other bits first. For files holding conversation text that are written as
    they go (`--record`'s response files); whole files use `atomic.write_atomic(private=True)`.

    Raises:
        OSError: it cannot be opened (no permission, a folder in the way); a FIFO or device is refused
            (`EINVAL`) rather than waited on.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK, 0o600)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        if info.st_mode & 0o077 and info.st_uid == os.getuid():
            os.fchmod(fd, stat.S_IMODE(info.st_mode) & 0o700)
        os.ftruncate(fd, 0)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return open(fd, "wb")


def private_file(path: Path) -> Path:
    """Create `path` empty with mode 0600 if it is missing; if it exists, is ours and others may
    read or write it, drop those bits. Returns `path`. Nothing is written to the file.

    Raises:
        OSError: it cannot be created or opened (a folder in the way, no permission).
    """
    fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o600)
    try:
        info = os.fstat(fd)
        if info.st_mode & 0o077 and info.st_uid == os.getuid() and stat.S_ISREG(info.st_mode):
            os.fchmod(fd, stat.S_IMODE(info.st_mode) & 0o700)
    finally:
        os.close(fd)
    return path
