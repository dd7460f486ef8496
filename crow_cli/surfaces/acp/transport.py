"""The stdio transport of `crow acp`: stdout kept for the protocol, stdin passed on as JSON objects only."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING

from ..stdio import LINE_LIMIT, LineTooLong, ProtocolOutput, pipes, read_line, too_long_answer
from .convert import screen_line

if TYPE_CHECKING:
    from .agent import CrowAgent

__all__ = ["STDIN_LIMIT", "ProtocolOutput", "objects_only", "streams"]

log = logging.getLogger("crow.acp")

STDIN_LIMIT = LINE_LIMIT
"""Bytes one JSON-RPC line may hold (an embedded file): the SDK's own default, and its reader's limit."""


async def streams(protocol_fd: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, ProtocolOutput]:
    """asyncio streams on stdin and the protocol descriptor (what `acp.stdio_streams` does on fd 0 and 1),
    and the writer's protocol: `stdio.pipes`.

    Raises:
        ConfigError: stdin or stdout is a terminal, a regular file or a device other than the output.
        OSError: the output cannot be written at all (a closed stdout: EBADF; /dev/full: ENOSPC).
    """
    return await pipes(protocol_fd, "crow acp talks to an editor")


async def objects_only(source: asyncio.StreamReader, sink: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        agent: CrowAgent) -> None:
    """Pass the JSON objects of `source` on to `sink` (the SDK's reader); answer every other line here.

    The SDK's reader takes any JSON value for a message (a non-object ends its receive loop, `null` reads
    as the end of input) and drops unparsable lines without an answer. At the end of `source`, or when
    cancelled (SIGTERM, SIGHUP), the running prompts are stopped (`CrowAgent.stop_prompts`) before
    `sink` ends, so their histories close and are stored.
    """
    try:
        while True:
            try:
                line = await read_line(source)
            except LineTooLong as exc:  # dropped as it arrived, answered once
                log.debug("answered a line over the limit: %s", exc)
                writer.write(too_long_answer(exc.limit))
                continue
            if not line:
                break
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

