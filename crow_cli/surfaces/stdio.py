"""The stdio transport `crow acp` and `crow mcp` share: JSON-RPC lines on stdin, bounded; stdout kept for the
protocol, and why writing it failed.

    stdin ──read_line (≤ LINE_LIMIT; longer: LineTooLong, skipped to its newline)──► the surface's reader
    stdout ◄── ProtocolOutput (the write error that ended the pipe) ◄── the SDK's writer

A line is read in slices of `CHUNK_LIMIT` bytes (the asyncio reader's own limit, so its buffer stays small), and
a line longer than `LINE_LIMIT` is dropped slice by slice as it arrives: one answer (`too_long_answer`), never
the whole line in memory.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import stat
import sys

from ..errors import ConfigError
from ..text import strip_controls

__all__ = ["CHUNK_LIMIT", "LINE_LIMIT", "LineTooLong", "ProtocolOutput", "log_handler", "pipes", "read_line",
           "too_long_answer"]

LINE_LIMIT = 50 * 1024 * 1024
"""Bytes one JSON-RPC line may hold (a long prompt, an embedded file): the ACP SDK's own default."""
CHUNK_LIMIT = 1024 * 1024
"""The asyncio reader's limit on stdin: what it buffers before a line is taken out of it in slices."""


class LineTooLong(Exception):
    """A line longer than the limit was read to its newline (or the end of input) and dropped.

    Attributes:
        limit: the limit it went over, in bytes.
    """

    def __init__(self, limit: int) -> None:
        super().__init__(f"a line longer than {limit} bytes was dropped")
        self.limit = limit


async def read_line(source: asyncio.StreamReader, limit: int = LINE_LIMIT) -> bytes:
    """One line of `source` with its newline (without one at the end of input; b"" at the end of input).

    At most `limit` bytes (and one slice of the reader's buffer) are held at once.

    Raises:
        LineTooLong: the line was longer than `limit`; it has been read and dropped up to and including its
            newline, so the next call reads the next line.
    """
    pieces: list[bytes] = []  # slices, never one growing buffer: no reallocation of the whole line
    held = 0
    dropping = False
    while True:
        try:
            piece = await source.readuntil(b"\n")
            ended = True
        except asyncio.LimitOverrunError as exc:  # no newline within the reader's limit yet: take a slice
            piece, ended = await source.readexactly(exc.consumed), False
        except asyncio.IncompleteReadError as exc:  # the end of input
            piece, ended = exc.partial, True
        if not dropping:
            pieces.append(piece)
            held += len(piece)
            if held > limit:
                dropping = True
                pieces.clear()
        if ended:
            if dropping:
                raise LineTooLong(limit)
            return b"".join(pieces)


def too_long_answer(limit: int = LINE_LIMIT) -> bytes:
    """The JSON-RPC error line (-32600, id null) answering a line longer than `limit` bytes."""
    answer = {"jsonrpc": "2.0", "id": None,
              "error": {"code": -32600, "message": f"Invalid Request: the line is longer than {limit} bytes"}}
    return json.dumps(answer).encode() + b"\n"


class ProtocolOutput(asyncio.StreamReaderProtocol):
    """The protocol side of the stdout pipe: whether it is gone, and why (`failure`).

    asyncio tells only `connection_lost` the write error that ended the pipe (EBADF, ENOSPC), and none when
    the peer closed its end (later writes are dropped); the SDKs' writers see a bare
    `ConnectionResetError("Connection lost")` either way. Nothing closes the pipe before crow exits.
    """

    def __init__(self) -> None:
        super().__init__(asyncio.StreamReader())
        self.gone = False
        self._error: OSError | None = None

    def connection_lost(self, exc: Exception | None) -> None:
        self.gone = True
        if isinstance(exc, OSError):
            self._error = exc
        super().connection_lost(exc)

    def failure(self) -> OSError:
        """Why writing failed once `gone`: the write's error, else EPIPE (the peer closed its end)."""
        return self._error or BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))


async def pipes(protocol_fd: int, talks: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, ProtocolOutput]:
    """asyncio streams on stdin and the protocol descriptor, and the writer's protocol (why the output ended).

    `protocol_fd` stays the caller's: `stdout.private_stdout` owns it (the real stdout, kept for the
    protocol while descriptor 1 points at stderr) and closes it. Read stdin with `read_line`.

    Args:
        talks: what the errors say, e.g. "crow acp talks to an editor".

    Raises:
        ConfigError: stdin or stdout is a terminal, a regular file or a device other than the output.
        OSError: the output cannot be written at all (a closed stdout: EBADF); a write of zero bytes at the
            start tells, so a peer that never asks anything still learns it.
    """
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=CHUNK_LIMIT)
    mode = os.fstat(sys.stdin.fileno()).st_mode
    if stat.S_ISCHR(mode) and not sys.stdin.isatty():  # /dev/null: accepted by asyncio, then unpollable
        raise ConfigError(f"{talks} over pipes on stdin and stdout (stdin is a device)")
    os.write(protocol_fd, b"")
    try:
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        out = os.fdopen(protocol_fd, "wb", buffering=0, closefd=False)
        transport, output = await loop.connect_write_pipe(ProtocolOutput, out)
    except ValueError as exc:  # a terminal or a regular file, not a pipe
        raise ConfigError(f"{talks} over pipes on stdin and stdout ({exc})") from None
    return reader, asyncio.StreamWriter(transport, output, None, loop), output


class _CrowLines(logging.Formatter):
    """A record as `crow run` and `crow chat` say theirs: `crow: warning: MESSAGE`, control characters removed."""

    def format(self, record: logging.LogRecord) -> str:
        return f"crow: {record.levelname.lower()}: {strip_controls(super().format(record))}"


def log_handler() -> logging.Handler:
    """The stderr handler of `crow acp` and `crow mcp`: each record as `crow: warning: …` (`crow: error: …`), the
    lines `crow run` and `crow chat` print, so an editor's agent log reads the same whichever surface wrote it."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_CrowLines("%(message)s"))
    return handler
