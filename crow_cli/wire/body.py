"""Bounds on what a server sends: decoded bytes per body and per SSE event, and a total deadline.

httpx's timeouts bound each read, not a request: a server that trickles a byte every few seconds
keeps a request alive for ever; and its content decoding is unbounded: ~300 KB of gzip became 1.6 GB
in memory. So crow counts the *decoded* bytes of every body it reads (gzip undone) and stops with a
one-line `ServerError` past a cap, and each auxiliary request (the model list, the context-window
lookup) gets a total deadline.

Caps: `MAX_EVENT_BYTES` per SSE event, `MAX_STREAM_BYTES` per streamed turn, `MAX_BODY_BYTES` per
whole body (a non-streamed completion, an error, `/models`, `/props`). The openai SDK reads a refusal's
body whole before it raises, so the chat client's transport reads error bodies first (`CappedErrorBodies`),
within `ERROR_DEADLINE_S` in all, keeping their first `ERROR_HEAD_BYTES`.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx

from ..errors import ServerError

__all__ = ["AUX_DEADLINE_S", "ERROR_DEADLINE_S", "ERROR_HEAD_BYTES", "MAX_BODY_BYTES", "MAX_EVENT_BYTES",
           "MAX_STREAM_BYTES", "BodyTooLarge", "CappedErrorBodies", "capped_events", "read_body", "read_body_sync",
           "read_parts"]

MAX_EVENT_BYTES = 8 * 1024 * 1024
"""Decoded bytes of one SSE event at most (a chunk is a few hundred bytes; a whole answer in one event fits)."""
MAX_STREAM_BYTES = 256 * 1024 * 1024
"""Decoded bytes of one streamed turn at most (128k tokens of chunks is ~40 MB)."""
MAX_BODY_BYTES = 16 * 1024 * 1024
"""Decoded bytes of a whole (not streamed) body at most: a completion, an error body, a model list."""
AUX_DEADLINE_S = 10.0
"""Seconds an auxiliary request (`/models`, `/props`) may take in all, however slowly it trickles."""
ERROR_HEAD_BYTES = 64 * 1024
"""Decoded bytes of an error body kept (and so parsed) at most: a refusal's reason is in its head, and parsing a
12 MB body cost the event loop 15 s. The rest is read (up to `MAX_BODY_BYTES`) and dropped."""
ERROR_DEADLINE_S = 30.0
"""Seconds an error body may take in all: one trickled a byte at a time held the run for as long as it liked."""

_MiB = 1024 * 1024
_BODY_FRAMING = {"content-encoding", "content-length", "transfer-encoding"}  # of the body as sent, not as read
_BLANK_LINE = re.compile(rb"\r\n\r\n|\n\n|\r\r")  # the end of an SSE event


class BodyTooLarge(ServerError):
    """A body or an event was larger, decoded, than crow reads."""


def _too_large(what: str, limit: int) -> BodyTooLarge:
    return BodyTooLarge(f"the server sent {what} of over {limit // _MiB} MiB (decoded); not read further")


def _last_blank_end(data: bytes) -> int:
    """Where the last `_BLANK_LINE` match of `data` ends (0: none), as `finditer` from the start finds it, without
    visiting every event: the match lies in the run of line breaks holding the last occurrence of a blank line,
    and matching restarts at each byte that is no line break, so only that run is searched."""
    last = max(data.rfind(b"\r\n\r\n"), data.rfind(b"\n\n"), data.rfind(b"\r\r"))
    if last < 0:
        return 0
    while last > 0 and data[last - 1] in b"\r\n":
        last -= 1
    end = 0
    for blank in _BLANK_LINE.finditer(data, last):
        end = blank.end()
    return end


async def capped_events(parts: AsyncIterator[bytes], *, max_event: int = MAX_EVENT_BYTES,
                        max_total: int = MAX_STREAM_BYTES) -> AsyncIterator[bytes]:
    """`parts` (an SSE body, content-decoded) passed on unchanged while no event holds more than
    `max_event` bytes and the whole no more than `max_total`.

    Raises:
        BodyTooLarge: a limit was passed (the part that passed it is not passed on).
    """
    total = pending = 0  # bytes in all; bytes of the current event so far
    tail = b""  # the end of the previous part: a blank line may straddle two parts
    async for part in parts:
        total += len(part)
        if total > max_total:
            raise _too_large("a stream", max_total)
        data, start = tail + part, len(tail)
        if pending + len(part) <= max_event:  # no event in this part can pass the cap: only its last blank line counts
            start = max(start, _last_blank_end(data))
            pending = 0 if start > len(tail) else pending
        else:
            for blank in _BLANK_LINE.finditer(data):
                if blank.end() <= start:
                    continue  # seen with the previous part
                if pending + blank.end() - start > max_event:
                    raise _too_large("an event", max_event)
                pending, start = 0, blank.end()
        pending += len(data) - start
        if pending > max_event:
            raise _too_large("an event", max_event)
        tail = part[-3:]
        yield part


async def read_parts(parts: AsyncIterator[bytes], limit: int = MAX_BODY_BYTES, what: str = "a body") -> bytes:
    """All of `parts` (a decoded body) joined, at most `limit` bytes.

    Raises:
        BodyTooLarge: it is longer (`what` names it in the message: "a completion").
    """
    body = bytearray()
    async for part in parts:
        body += part
        if len(body) > limit:
            raise _too_large(what, limit)
    return bytes(body)


async def read_body(response: Any, limit: int = MAX_BODY_BYTES) -> bytes:
    """The whole decoded body of an `httpx.Response` opened with `stream=True`, at most `limit` bytes.

    Raises:
        BodyTooLarge: it is longer.
        httpx.HTTPError: the connection failed.
    """
    return await read_parts(response.aiter_bytes(), limit)


class CappedErrorBodies(httpx.AsyncBaseTransport):
    """An httpx transport around `inner` whose non-2xx answers come back with their body already read
    (decoded, at most `limit` bytes: `read_parts`) and held in memory, so the openai SDK's own read of a
    refusal's body (whole, unbounded, before it raises `APIStatusError`) reads only that. 2xx bodies
    pass untouched: a streamed turn is capped as it is read (`capped_events`).

    `handle_async_request` raises `BodyTooLarge` for a longer error body (the SDK raises it as the
    `__cause__` of an `APIConnectionError`), and httpx's errors when the connection fails.
    """

    def __init__(self, inner: httpx.AsyncBaseTransport, limit: int = MAX_BODY_BYTES,
                 deadline_s: float = ERROR_DEADLINE_S) -> None:
        self.inner = inner
        self.limit = limit
        self.deadline_s = deadline_s

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if response.is_success:
            return response
        status = response.status_code
        sent = httpx.Response(status, headers=response.headers, stream=response.stream)  # decoded as it is read
        head = bytearray()
        total = 0
        try:
            async with asyncio.timeout(self.deadline_s):
                async for part in sent.aiter_bytes():
                    total += len(part)
                    if total > self.limit:
                        raise _too_large(f"an error body ({status})", self.limit)
                    if len(head) < ERROR_HEAD_BYTES:
                        head += part[:ERROR_HEAD_BYTES - len(head)]
        except TimeoutError:
            pass  # trickled: what came within the deadline is the refusal
        finally:
            await sent.aclose()  # past the cap or the deadline: the connection is dropped, the rest never read
        body = bytes(head)
        headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in _BODY_FRAMING]
        return httpx.Response(status, headers=headers, content=body, extensions=response.extensions)

    async def aclose(self) -> None:
        await self.inner.aclose()


def read_body_sync(response: Any, limit: int = MAX_BODY_BYTES, deadline: float | None = None) -> bytes:
    """`read_body` for a synchronous `httpx.Response`; `deadline` (`time.monotonic()`) ends a trickle.

    Raises:
        BodyTooLarge: it is longer.
        TimeoutError: the deadline passed.
        httpx.HTTPError: the connection failed.
    """
    body = bytearray()
    parts: Iterator[bytes] = response.iter_bytes()
    for part in parts:
        body += part
        if len(body) > limit:
            raise _too_large("a body", limit)
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError
    return bytes(body)
