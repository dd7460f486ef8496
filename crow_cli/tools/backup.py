"""File backups for `/undo`: crow's file tools hand each file's prior content to a hook before they write.

A surface that records a session sets the hook (`set_backup_hook`) for the context its run starts in
(worker threads of sync tools copy the context, so they see it too); `before_write` then passes the
file and its bytes before the change (None: it did not exist) to it. Without a hook nothing is kept.
Files over 10 MiB are not kept (their undo is not possible, and says so).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from pathlib import Path

__all__ = ["MAX_BACKUP_BYTES", "BackupHook", "before_write", "set_backup_hook"]

MAX_BACKUP_BYTES = 10 * 1024 * 1024

BackupHook = Callable[[Path, bytes | None], None]
"""Called with a file's resolved path and its content before a write (None: the file is new)."""

_HOOK: contextvars.ContextVar[BackupHook | None] = contextvars.ContextVar("crow_backup_hook", default=None)


def set_backup_hook(hook: BackupHook | None) -> contextvars.Token[BackupHook | None]:
    """Keep prior contents through `hook` in this context (None: keep nothing); returns the token to reset it."""
    return _HOOK.set(hook)


def before_write(file: Path) -> None:
    """Hand `file`'s current content to the hook, if one is set; never raises for the file's sake."""
    hook = _HOOK.get()
    if hook is None:
        return
    try:
        if not file.exists():
            content: bytes | None = None
        elif not file.is_file() or file.stat().st_size > MAX_BACKUP_BYTES:
            return
        else:
            content = file.read_bytes()
    except OSError:
        return
    hook(file, content)
