"""Resolving paths crow is given or finds on its own, with a symlink loop as an ordinary `OSError`.

Python 3.11's `Path.resolve()` raises `RuntimeError` on a loop (`ln -s loop loop`), which no
`except OSError` catches: `-f loop`, `--workspace loop`, a loop in a searched tree ended in an internal
error. Standard library only.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

__all__ = ["SymlinkLoop", "resolve_path"]


class SymlinkLoop(OSError):
    """A path whose symlinks lead back to themselves; its `str()` is one line: `'loop' is a symlink loop`."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(errno.ELOOP, "a symlink loop", os.fspath(path))

    def __str__(self) -> str:
        return f"{self.filename!r} is a symlink loop"


def resolve_path(path: str | os.PathLike[str], *, strict: bool = False) -> Path:
    """`Path(path).resolve(strict)`, symlinks followed.

    Raises:
        SymlinkLoop: the path's links go round in a loop (an `OSError`, errno ELOOP).
        OSError: with `strict`, the path does not exist.
    """
    try:
        return Path(path).resolve(strict=strict)
    except RuntimeError as exc:  # Python < 3.13 on a loop
        raise SymlinkLoop(path) from exc
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise SymlinkLoop(path) from exc
        raise
