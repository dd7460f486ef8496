"""File backups for `/undo`: crow's file tools hand each file's prior content to a hook before they write.

A surface that records a session puts the hook in the run's `ToolContext.backup`; `before_write` passes
it the file, its bytes before the change (None: it did not exist) and the SHA-256 of the bytes about to
be written (undo restores only a file that still holds them). The hook may be called from a tool's
worker thread. Without a hook nothing is kept. Files over 10 MiB are not kept (their undo is not
possible).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from .context import ToolContext

__all__ = ["MAX_BACKUP_BYTES", "before_write"]

MAX_BACKUP_BYTES = 10 * 1024 * 1024


def before_write(file: Path, context: ToolContext, data: bytes) -> None:
    """Hand `file`'s current content and the hash of `data` (what is about to be written) to
    `context.backup`, if set; never raises for the file's sake."""
    if context.backup is None:
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
    context.backup(file, content, hashlib.sha256(data).hexdigest())
