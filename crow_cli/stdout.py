"""The process's standard output kept for crow's own output (a leaf: stdlib only, cheap to import)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import TextIO

__all__ = ["private_stdout"]


@contextlib.contextmanager
def private_stdout() -> Iterator[TextIO]:
    """The process's real stdout as a private file, while file descriptor 1 points at stderr.

    Whatever else writes to fd 1 (a plugin's `os.write(1, …)`, a subprocess, a library) lands on stderr,
    so stdout carries only what crow writes to the yielded file (the answer, JSONL events, protocol
    messages). fd 1 is restored on exit. Where fd 1 cannot be duplicated, `sys.stdout` is yielded.

    Raises:
        OSError: what is left to write cannot be written (a closed stdout, a full disk), at the end of
            the block: output is never lost silently.
    """
    stream = sys.stdout
    with contextlib.suppress(OSError, ValueError):
        stream.flush()
    try:
        real = os.dup(1)
        os.dup2(2, 1)
    except OSError:
        yield stream
        return
    out = os.fdopen(real, "w", encoding=stream.encoding or "utf-8", errors=stream.errors or "strict",
                    closefd=False)
    try:
        yield out
        out.flush()
    finally:
        with contextlib.suppress(OSError, ValueError):  # the block's own error is the one to report
            out.flush()
        os.dup2(real, 1)
        os.close(real)
