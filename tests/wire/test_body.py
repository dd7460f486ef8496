"""Decoded bytes per SSE event and per body are bounded (gzip bodies of ~300 KB can decode to 1.6 GB)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from crow_cli.wire.body import ERROR_HEAD_BYTES, BodyTooLarge, CappedErrorBodies, capped_events, read_parts
from tests.support import crow, gzip_bomb, raw_http_server


async def _parts(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def _all(parts: AsyncIterator[bytes]) -> bytes:
    return b"".join([p async for p in parts])


@pytest.mark.parametrize("separator", [(b"\n", b"\n"), (b"\r\n", b"\r\n"), (b"\n\n", b""), (b"\r", b"\r")])
async def test_many_small_events_pass_even_when_their_blank_lines_straddle_parts(separator: tuple[bytes, bytes]
                                                                                  ) -> None:
    first, second = separator
    parts = []
    for _ in range(100):
        parts += [b"data: " + b"x" * 50 + first, second]
    assert len(await _all(capped_events(_parts(*parts), max_event=100))) == 100 * (56 + len(first + second))


def _event_cap_passed(parts: list[bytes], max_event: int) -> int | None:
    """The part at which the event cap is passed, counted by visiting every blank line (the reference)."""
    pending, tail = 0, b""
    for number, part in enumerate(parts):
        data, start = tail + part, len(tail)
        for blank in re.finditer(rb"\r\n\r\n|\n\n|\r\r", data):
            if blank.end() <= start:
                continue
            if pending + blank.end() - start > max_event:
                return number
            pending, start = 0, blank.end()
        pending += len(data) - start
        if pending > max_event:
            return number
        tail = part[-3:]
    return None


async def _cap_passed(parts: list[bytes], max_event: int) -> int | None:
    passed: list[bytes] = []
    try:
        async for part in capped_events(_parts(*parts), max_event=max_event):
            passed.append(part)
    except BodyTooLarge:
        return len(passed)
    return None


# a part's events are no longer visited one by one when none of them can pass the cap (the hot path of every
# stream): the cap must be passed at the same byte as before, whatever the line breaks and where parts split
@settings(max_examples=1000, deadline=None)
@example(parts=[b"\n\n\nxx", b"x", b"xxxx", b"xxxxx"], max_event=12)  # an odd run of line breaks: where is its end?
@given(st.lists(st.binary(min_size=1, max_size=12).map(lambda b: bytes(b"x\r\n"[n % 3] for n in b)),
                min_size=1, max_size=12),
       st.integers(min_value=1, max_value=24))
def test_the_event_cap_is_passed_where_every_blank_line_says(parts: list[bytes], max_event: int) -> None:
    assert asyncio.run(_cap_passed(parts, max_event)) == _event_cap_passed(parts, max_event)


async def test_one_event_over_the_cap_is_refused() -> None:
    parts = _parts(b"data: ok\n\n", b"data: " + b"x" * 60, b"y" * 60)
    with pytest.raises(BodyTooLarge, match=r"^the server sent an event of over 0 MiB \(decoded\)"):
        await _all(capped_events(parts, max_event=100))


async def test_the_whole_stream_and_a_body_are_capped() -> None:
    with pytest.raises(BodyTooLarge, match="a stream"):
        await _all(capped_events(_parts(*[b"data: 1\n\n"] * 100), max_total=500))
    with pytest.raises(BodyTooLarge, match="a model list"):
        await read_parts(_parts(b"x" * 600), 500, "a model list")
    assert await read_parts(_parts(b"x" * 500), 500) == b"x" * 500


# The body of a non-2xx answer goes through the same cap as every other body, never read whole before crow
# sees it (a 400 with a 1 GB body would be read into memory)
def test_a_huge_error_body_is_capped_not_read_whole(tmp_path: Path) -> None:
    sent = [0]

    def endless_400(handler: Any) -> None:  # 1 MiB chunks until crow hangs up (1 GiB at most)
        handler.protocol_version = "HTTP/1.1"
        handler.send_response(400)
        handler.send_header("content-type", "application/json")
        handler.send_header("transfer-encoding", "chunked")
        handler.end_headers()
        block = b'{"error": {"message": "' + b"x" * (1 << 20)
        while sent[0] < 1 << 30 and not handler.stop.is_set():
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(block), block))
            sent[0] += len(block)
            block = b"x" * (1 << 20)

    with raw_http_server(endless_400) as base_url:
        proc = crow("run", "--base-url", base_url, "--api-key", "sk-test", "--model", "m", "--no-tools", "hi",
                    cwd=tmp_path, timeout=120)
    assert (proc.returncode, proc.stderr) == (
        1, "crow: error: the server sent an error body (400) of over 16 MiB (decoded); not read further\n")
    assert sent[0] < 64 << 20  # the cap, and what the sockets' buffers held: not retried, not read on


@pytest.mark.parametrize(("decoded", "shown"), [
    (40 << 20, "crow: error: the server sent an error body (400) of over 16 MiB (decoded); not read further\n"),
    (10, "crow: error: request rejected (400): bad request\n")])
def test_a_gzip_error_body_is_capped_decoded_and_read_when_small(tmp_path: Path, decoded: int, shown: str) -> None:
    with raw_http_server(lambda h: gzip_bomb(h, decoded, 400, b'{"error": {"message": "bad request"}')) as base_url:
        proc = crow("run", "--base-url", base_url, "--api-key", "sk-test", "--model", "m", "--no-tools", "hi",
                    cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (1, shown)


class _ErrorBody(httpx.AsyncBaseTransport):
    """A 400 whose body is `parts`, then (with `hang`) nothing more, ever: a server that trickles it."""

    def __init__(self, parts: list[bytes], hang: bool = False) -> None:
        self.parts, self.hang = parts, hang

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        parts, hang = self.parts, self.hang

        class Body(httpx.AsyncByteStream):
            async def __aiter__(self) -> AsyncIterator[bytes]:
                for part in parts:
                    yield part
                if hang:
                    await asyncio.Event().wait()

        return httpx.Response(400, stream=Body())


# A slowly sent error body has a total deadline, not only the per-read timeout
async def test_a_trickled_error_body_ends_at_its_deadline_with_what_came() -> None:
    transport = CappedErrorBodies(_ErrorBody([b'{"error": {"message": "bad temperature"'], hang=True),
                                  deadline_s=0.05)
    response = await transport.handle_async_request(httpx.Request("POST", "http://llm.test/v1/chat/completions"))
    assert response.status_code == 400 and response.content == b'{"error": {"message": "bad temperature"'


# Only the head of a large error body is kept (a 12 MB one would cost 15 s of event-loop time to parse)
async def test_only_the_head_of_a_large_error_body_is_kept() -> None:
    body = b'{"error": {"message": "too long"}, "detail": "' + b"x" * (12 << 20)
    transport = CappedErrorBodies(_ErrorBody([body[at:at + 65536] for at in range(0, len(body), 65536)]))
    response = await transport.handle_async_request(httpx.Request("POST", "http://llm.test/v1/chat/completions"))
    assert response.content == body[:ERROR_HEAD_BYTES]
