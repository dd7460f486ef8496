"""From the bytes of a 200 response to chunk dicts: SSE decoded by `httpx-sse`, plus the shapes servers really send.

Imported only once a request is made (it imports httpx). Servers send pings, errors in three shapes, damaged
and wrong-typed events, bodies that stay open after `[DONE]`, and JSON or HTML where a stream was asked for;
each is read as `iter_chunks` tells, so the loop sees valid chunks, warnings, or one `ServerError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from httpx_sse import EventSource

from ..errors import ServerError
from ..events import WarningEvent
from ..text import looks_like_html, short_text
from .body import capped_events, read_parts
from .errors import stream_error
from .shape import check_chunk, has_choice

__all__ = ["DONE_GRACE_S", "AfterDone", "chunk_from_completion", "iter_chunks", "recover_frames"]

_SNIFF_BYTES = 4096
DONE_GRACE_S = 0.5
"""Seconds the rest of a body is waited for after `data: [DONE]` (its end comes with it from every server
seen); a server that keeps the body open longer only loses the connection's reuse."""


@dataclass
class AfterDone:
    """How long one server's body is waited for after `data: [DONE]`, learned per client: `DONE_GRACE_S` until
    a body is still open when it has passed; from then on the body is closed at once after `[DONE]` (its
    connection is not reused either way; a server that ends its bodies keeps the reuse and pays nothing)."""

    grace_s: float = DONE_GRACE_S


_MARKER = re.compile(r"data:|\n")
_DECODER = json.JSONDecoder()


def _error_in(payload: Any, event: str | None) -> Any:
    if type(payload) is not dict and not isinstance(payload, Mapping):  # a dict first: the ABC check costs more
        return None
    if payload.get("error"):
        return payload["error"]
    if payload.get("object") == "error" or event == "error":
        return payload
    return None


def chunk_from_completion(completion: Mapping[str, Any]) -> dict[str, Any]:
    """One stream chunk equivalent to a non-streamed `chat.completion` (choices[].message → delta)."""
    choices: Any = completion.get("choices")
    if isinstance(choices, list):  # else passed on as it is, for `wire.shape` to name
        choices = [_choice_from_message(c) if isinstance(c, Mapping) else c for c in choices]
    return {"choices": choices, "usage": completion.get("usage")}


def _choice_from_message(choice: Mapping[str, Any]) -> dict[str, Any]:
    message = choice.get("message")
    if isinstance(message, Mapping):
        message = dict(message)
        calls = message.get("tool_calls")
        if isinstance(calls, list):
            message["tool_calls"] = [{"index": i, **c} for i, c in enumerate(calls) if isinstance(c, Mapping)]
    return {"index": choice.get("index", 0), "delta": message, "finish_reason": choice.get("finish_reason")}


def recover_frames(data: str) -> list[Any]:
    """The complete JSON values in damaged event data that start right after a `data:` marker or a line
    break (skipping spaces), in order; a value's own text is never searched for more markers."""
    frames: list[Any] = []
    position = 0
    while (marker := _MARKER.search(data, position)) is not None:
        start = marker.end()
        while start < len(data) and data[start] in " \t\r":
            start += 1
        try:
            value, end = _DECODER.raw_decode(data, start)
        except (ValueError, RecursionError):
            position = marker.end()
            continue
        if isinstance(value, dict):
            frames.append(value)
        position = end
    return frames


_BOM = b"\xef\xbb\xbf"


class _Sniffed(httpx.AsyncByteStream):
    """Passes the body on and keeps its first bytes, to name a body that held no event. A UTF-8 byte order
    mark at the start is dropped, as the SSE spec's UTF-8 decode does (else the first line's field name
    would be `\ufeffdata` and the first event lost)."""

    def __init__(self, parts: AsyncIterator[bytes]) -> None:
        self.parts = parts
        self.head = b""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        start = b""  # the body's first bytes, held until it is known whether they are a byte order mark
        async for part in self.parts:
            if len(start) < len(_BOM) and not self.head:
                start += part
                if len(start) < len(_BOM) and _BOM.startswith(start):
                    continue
                part = start.removeprefix(_BOM)
            if len(self.head) < _SNIFF_BYTES:
                self.head += part[: _SNIFF_BYTES - len(self.head)]
            yield part
        if len(start) < len(_BOM) and not self.head and start:  # a body shorter than a byte order mark
            self.head = start
            yield start


def _no_stream_error(head: bytes, content_type: str) -> ServerError:
    text = head.decode("utf-8", "replace")
    if not text.strip():
        return ServerError("the server answered 200 with an empty body, not an event stream (is --base-url right?)")
    if looks_like_html(text):
        return ServerError(f"the server answered 200 with an HTML page ({short_text(text, 80)!r}), not an event "
                           "stream: a login or proxy page? (is --base-url right?)")
    if content_type and "event-stream" not in content_type and "text/plain" not in content_type:
        return ServerError(f"the server answered {content_type.split(';')[0]}, not an event stream "
                           f"(is --base-url right?): {short_text(text, 80)!r}")
    if not re.search(r"^(data|event|id|retry)?:", text, re.MULTILINE):  # not one SSE line: some other text
        return ServerError(f"the server answered 200 with text that is not an event stream (is --base-url "
                           f"right?): {short_text(text, 80)!r}")
    return ServerError("the server ended the stream without sending a single chunk")


async def iter_chunks(parts: AsyncIterator[bytes], content_type: str, after_done: AfterDone | None = None
                      ) -> AsyncGenerator[dict[str, Any] | WarningEvent, None]:
    """Decode one streamed turn: each chunk as the dict of its `data:` JSON, in order, by the rules below.

    * An event without data (`event: ping`, `data:` alone, `retry: 1000`, `: comment`) is skipped, as the
      SSE spec says it is not dispatched; `[DONE]` is recognised with stray spaces around it. What follows
      `[DONE]` (normally only the body's end) is read and ignored, for up to `DONE_GRACE_S`: a body read to its
      end lets httpx put the connection back in its pool, so the next turn reuses it; a server whose body is
      still open then has it closed at once after `[DONE]` on its later turns (`AfterDone`). The body is
      decoded as SSE whatever its content type says when that is `text/event-stream`, `text/plain` or absent.
    * Errors inside the stream come in three shapes: `{"error": {…}}` (OpenAI, vLLM via LiteLLM), a
      top-level `{"object": "error", "message": …}` (older vLLM) and an `event: error` whose data is
      the error itself. Each fails the turn with the server's message.
    * A damaged event: data that is not JSON. Every complete JSON frame that follows an embedded `data:`
      marker or a line break inside it is recovered (a provider sent a chunk cut mid-JSON and the next
      `data: {…}` frame on the same line); what cannot be parsed is skipped with one `WarningEvent` that
      says how much was skipped and how many frames were recovered. A damaged event that nothing valid
      follows (the body ends after it) is a cut stream: `ServerError` ("not JSON").
    * An event whose data is JSON but not an object (`[1,2]`, `"hi"`, `5`, `null`) is skipped with one
      `WarningEvent`; it never reaches the loop.
    * Every chunk's shape is checked (`wire.shape`): a field of the wrong type is removed, with one
      `WarningEvent` per distinct problem in a stream. A stream in which such a problem was found and
      no chunk kept a choice with a delta or a finish_reason can be trusted in nothing: `ServerError`.
    * A server that ignores `stream: true` and answers `application/json` has its completion turned into
      one equivalent chunk; a JSON error body is an error. An HTML page (a login or proxy page), an empty
      body, any other content type, or a stream that ends without a single chunk is named as such in a
      `ServerError` rather than read as an empty answer.

    Args:
        parts: the response body, content-decoded (gzip undone), in pieces as they arrive.
        content_type: the response's `content-type` header ("" when absent).
        after_done: how long the rest of the body is waited for after `[DONE]` (the client's, learned across
            its turns; default: `DONE_GRACE_S`, learned for this call only).

    Yields:
        chunk dicts; a `WarningEvent` before the frames recovered from (or after) a damaged event.

    Raises:
        ServerError: an error inside the stream, a body that is neither SSE nor a completion (HTML, empty),
            a damaged event at the end of the body, or a stream with no chunk at all.
        httpx.TransportError: the connection broke or went idle (mapped to `StreamCut` by the client).
    """
    content_type = content_type.lower()
    if "json" in content_type and "event-stream" not in content_type:
        yield await _whole_json(parts)
        return
    parts = capped_events(parts)  # decoded bytes per event and per turn are bounded (gzip bombs)
    if "html" in content_type:
        head = b""
        async for part in parts:
            head += part
            if len(head) >= _SNIFF_BYTES:
                break
        raise _no_stream_error(head, content_type)
    sniffed = _Sniffed(parts)
    source = EventSource(httpx.Response(200, headers={"content-type": "text/event-stream; charset=utf-8"},
                                        stream=sniffed))
    count = 0
    shape = _ShapeCheck()
    damaged: str | None = None  # a damaged event not yet followed by anything valid
    events = source.aiter_sse()
    try:
        async for sse in events:
            data = sse.data.strip()
            if not data:
                continue
            if data == "[DONE]":
                await _read_to_end(events, after_done or AfterDone())
                break
            try:
                payloads = [json.loads(data)]
            except (ValueError, RecursionError):  # nested deeper than the parser goes: damaged too
                payloads = recover_frames(data)
                if not payloads:
                    damaged = data if damaged is None else damaged
                    continue
                yield WarningEvent(f"the server sent a damaged event; skipped what was not JSON and recovered "
                                   f"{len(payloads)} frame(s) from it: {data[:60]!r}")
            if damaged is not None:
                yield WarningEvent(f"the server sent an event that is not JSON; skipped it: {damaged[:60]!r}")
                damaged = None
            for payload in payloads:
                error = _error_in(payload, sse.event)
                if error is not None:
                    raise stream_error(error)
                if not isinstance(payload, dict):
                    yield WarningEvent(f"the server sent an event that is not a JSON object; skipped it: "
                                       f"{data[:60]!r}")
                    continue
                count += 1
                if (warning := shape.check(payload)) is not None:
                    yield warning
                yield payload
    finally:
        await events.aclose()
    shape.end()
    if damaged is not None and (count or not sniffed.head.lstrip().startswith(b"<")):
        raise ServerError(f"the server sent a chunk that is not JSON (the stream ends there): {damaged[:60]!r}")
    if count == 0:
        raise _no_stream_error(sniffed.head, content_type)


async def _read_to_end(events: AsyncIterator[Any], after: AfterDone) -> None:
    """Read and drop what follows `[DONE]` until the body ends, within `after.grace_s` (capped as the stream
    is): the answer is complete, so what comes after it, or a failure to read it, changes nothing. A body still
    open then sets the grace to 0: later turns close it at once."""
    if after.grace_s <= 0:
        return
    with contextlib.suppress(httpx.HTTPError, ServerError):
        try:
            async with asyncio.timeout(after.grace_s):
                async for _ in events:
                    pass
        except TimeoutError:
            after.grace_s = 0.0


async def _whole_json(parts: AsyncIterator[bytes]) -> dict[str, Any]:
    body = await read_parts(parts, what="a completion")
    if not body.strip():
        raise ServerError("the server answered 200 with an empty body, not an event stream (is --base-url right?)")
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise ServerError("the server answered with invalid JSON instead of an event stream") from exc
    error = _error_in(payload, None)
    if error is not None:
        raise stream_error(error)
    if not isinstance(payload, Mapping) or not payload.get("choices"):
        raise ServerError("the server answered with JSON that is neither a stream nor a completion")
    chunk = chunk_from_completion(payload)
    shape = _ShapeCheck()
    shape.check(chunk)
    shape.end()
    return chunk


class _ShapeCheck:
    """Checks each chunk of one stream (`wire.shape`): says each distinct problem once, and fails a
    stream in which nothing could be trusted."""

    def __init__(self) -> None:
        self.said: set[str] = set()
        self.first: str | None = None
        self.trusted = False

    def check(self, chunk: dict[str, Any]) -> WarningEvent | None:
        """Clean `chunk` in place; the warning for its problems not said before in this stream, if any."""
        problems = check_chunk(chunk)
        if not self.trusted and has_choice(chunk):
            self.trusted = True
        if not problems:
            return None
        self.first = self.first or problems[0]
        new = [p for p in problems if p not in self.said]
        self.said.update(new)
        if not new:
            return None
        return WarningEvent(f"the server sent a chunk whose {'; '.join(new)}; skipped "
                            f"{'that field' if len(new) == 1 else 'those fields'}")

    def end(self) -> None:
        """Raise when problems were found and no chunk carried a choice (a delta or a finish_reason)."""
        if self.first is not None and not self.trusted:
            raise ServerError(f"the server's stream had no chunk of the expected shape ({self.first})")
