"""Folders and files only their owner can read: what crow keeps holds tool output (file contents,
environment dumps), so the folders it creates are 0700 and its files 0600, like `~/.ssh`.

A folder that already existed keeps its mode (`~/.local/share` is shared with every other program);
a file of crow's own that others could read (made by an older crow) loses its group and other bits.
Standard library only.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["private_dir", "private_file"]


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
