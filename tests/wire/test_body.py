"""Decoded bytes per SSE event and per body are bounded (issue: gzip bodies of ~300 KB became 1.6 GB)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from crow_cli.wire.body import BodyTooLarge, capped_events, read_parts


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
