"""The stdio transport of `crow acp`: stdout kept for the protocol, stdin passed on as JSON objects only."""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import stat
import sys
from typing import TYPE_CHECKING

from ...errors import ConfigError
from .convert import screen_line

if TYPE_CHECKING:
    from .agent import CrowAgent

__all__ = ["STDIN_LIMIT", "ProtocolOutput", "objects_only", "streams"]

log = logging.getLogger("crow.acp")

STDIN_LIMIT = 50 * 1024 * 1024
"""Bytes one JSON-RPC line may hold (an embedded file): the SDK's own default."""

class ProtocolOutput(asyncio.StreamReaderProtocol):
    """The protocol side of the stdout pipe: whether it is gone, and why (`failure`).

    asyncio tells only `connection_lost` the write error that ended the pipe (EBADF, ENOSPC), and none when
    the editor closed its end (later writes are dropped); the SDK's writer sees a bare
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
        """Why writing failed once `gone`: the write's error, else EPIPE (the editor closed its end)."""
        return self._error or BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))


async def streams(protocol_fd: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, ProtocolOutput]:
    """asyncio streams on stdin and the protocol descriptor (what `acp.stdio_streams` does on fd 0 and 1),
    and the writer's protocol (`ProtocolOutput`: why the output ended, if it failed).

    `protocol_fd` stays the caller's: `stdout.private_stdout` owns it (the real stdout, kept for the
    protocol while descriptor 1 points at stderr) and closes it.

    Raises:
        ConfigError: stdin or stdout is a terminal, a regular file or a device other than the output.
        OSError: the output cannot be written at all (a closed stdout: EBADF; /dev/full: ENOSPC); a write of
            zero bytes at the start tells, so an editor that never asks anything still learns it.
    """
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=STDIN_LIMIT)
    mode = os.fstat(sys.stdin.fileno()).st_mode
    if stat.S_ISCHR(mode) and not sys.stdin.isatty():  # /dev/null: accepted by asyncio, then unpollable
        raise ConfigError("crow acp talks to an editor over pipes on stdin and stdout (stdin is a device)")
    os.write(protocol_fd, b"")
    try:
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        out = os.fdopen(protocol_fd, "wb", buffering=0, closefd=False)
        transport, output = await loop.connect_write_pipe(ProtocolOutput, out)
    except ValueError as exc:  # a terminal or a regular file, not a pipe
        raise ConfigError(f"crow acp talks to an editor over pipes on stdin and stdout ({exc})") from None
    return reader, asyncio.StreamWriter(transport, output, None, loop), output



async def _read_line(source: asyncio.StreamReader) -> bytes:
    """One line of any length (b"" at the end of input)."""
    chunks: list[bytes] = []
    while True:
        try:
            chunks.append(await source.readuntil(b"\n"))
            return b"".join(chunks)
        except asyncio.LimitOverrunError as exc:
            chunks.append(await source.readexactly(exc.consumed))
        except asyncio.IncompleteReadError as exc:
            chunks.append(exc.partial)
            return b"".join(chunks)


async def objects_only(source: asyncio.StreamReader, sink: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        agent: CrowAgent) -> None:
    """Pass the JSON objects of `source` on to `sink` (the SDK's reader); answer every other line here.

    The SDK's reader takes any JSON value for a message (a non-object ends its receive loop, `null` reads
    as the end of input) and drops unparsable lines without an answer. At the end of `source`, or when
    cancelled (SIGTERM, SIGHUP), the running prompts are stopped (`CrowAgent.stop_prompts`) before
    `sink` ends, so their histories close and are stored.
    """
    try:
        while line := await _read_line(source):
            if not line.strip():
                continue
            passed, answer = screen_line(line.strip())
            if answer is not None:
                if "error" in answer:
                    log.debug("answered a malformed line: %s", answer["error"]["message"])
                writer.write(json.dumps(answer).encode() + b"\n")
            if passed is not None:
                sink.feed_data(passed + b"\n")
    finally:
        try:
            await agent.stop_prompts()
        finally:
            sink.feed_eof()

