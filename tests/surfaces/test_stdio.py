"""The stdio transport `crow acp` and `crow mcp` share (crow_cli/surfaces/stdio.py): lines read with a bound."""

from __future__ import annotations

import asyncio
import json

import pytest

from crow_cli.surfaces.stdio import LineTooLong, read_line, too_long_answer


def _reader(*pieces: bytes, limit: int = 64) -> asyncio.StreamReader:
    reader = asyncio.StreamReader(limit=limit)
    for piece in pieces:
        reader.feed_data(piece)
    reader.feed_eof()
    return reader


async def test_a_line_within_the_limit_is_read_whole_across_many_reader_slices() -> None:
    line = b'{"x": "' + b"a" * 1000 + b'"}\n'
    reader = _reader(line, b"next\n", b"tail")
    assert await read_line(reader, limit=2000) == line
    assert await read_line(reader, limit=2000) == b"next\n"
    assert await read_line(reader, limit=2000) == b"tail"
    assert await read_line(reader, limit=2000) == b""


async def test_a_line_over_the_limit_is_refused_once_and_skipped_to_its_newline() -> None:
    reader = _reader(b"b" * 5000, b"c" * 5000 + b"\n", b'{"ok": 1}\n')
    with pytest.raises(LineTooLong) as too_long:
        await read_line(reader, limit=4096)
    assert too_long.value.limit == 4096
    assert await read_line(reader, limit=4096) == b'{"ok": 1}\n'  # the next line is whole
    assert await read_line(reader, limit=4096) == b""


async def test_a_line_over_the_limit_at_the_end_of_input_is_refused_then_the_input_ends() -> None:
    reader = _reader(b"d" * 9000)
    with pytest.raises(LineTooLong):
        await read_line(reader, limit=4096)
    assert await read_line(reader, limit=4096) == b""


def test_the_answer_to_a_line_over_the_limit_is_one_invalid_request_error() -> None:
    answer = json.loads(too_long_answer(4096))
    assert answer["id"] is None and answer["error"]["code"] == -32600 and "4096" in answer["error"]["message"]


def test_acp_and_mcp_log_lines_read_as_run_and_chat_s_warnings(capsys: pytest.CaptureFixture[str]) -> None:
    import logging

    from crow_cli.surfaces.stdio import log_handler

    handler = log_handler()
    record = logging.LogRecord("crow.mcp", logging.WARNING, __file__, 1, "MCP server %r failed\x1b[2J", ("docs",),
                               None)
    assert handler.format(record) == "crow: warning: MCP server 'docs' failed[2J"
