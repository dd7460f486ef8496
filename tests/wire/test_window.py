"""The context-window lookup has a total deadline and a body cap: it never holds up the first turn."""

from __future__ import annotations

from crow_cli.wire.window import discover_context_window
from tests.support import gzip_bomb, raw_http_server, trickle


# A /models that trickles a byte every 5 s gives an unknown window at the deadline: `crow run` still sends
async def test_a_trickling_server_gives_unknown_at_the_deadline() -> None:
    with raw_http_server(trickle) as base_url:
        assert await discover_context_window(base_url, "m", "k", timeout_s=1.0) is None


async def test_a_gzip_bomb_gives_unknown() -> None:
    with raw_http_server(gzip_bomb) as base_url:
        assert await discover_context_window(base_url, "m", "k") is None


async def test_a_plain_answer_is_read() -> None:
    with raw_http_server(lambda h: gzip_bomb(h, decoded_bytes=10)) as base_url:
        assert await discover_context_window(base_url, "m", "k") == 4096
