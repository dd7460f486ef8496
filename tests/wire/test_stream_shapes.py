"""Response shapes beyond the corpus: SSE events without data, other error shapes, non-SSE 200s."""

from __future__ import annotations

import json

import httpx
import pytest
import respx

from crow_cli.errors import ServerError
from crow_cli.events import WarningEvent
from crow_cli.history import user_message
from crow_cli.wire.accumulate import StreamAccumulator
from crow_cli.wire.client import ChatClient, ClientSettings
from tests.support import chunk, sse, text_sse, tool_delta

BASE = "http://llm.test/v1"
URL = f"{BASE}/chat/completions"


async def assemble(response: httpx.Response, **settings):
    c = ChatClient(ClientSettings(base_url=BASE, model="m", api_key="k", max_retries=0, **settings))
    acc = StreamAccumulator()
    with respx.mock() as mock:
        route = mock.post(URL).mock(return_value=response)
        try:
            async for ch in c.stream([user_message("x")]):
                acc.feed(ch)
        finally:
            await c.aclose()
    return acc.finish()[0], route


def event_stream(body: str) -> httpx.Response:
    return httpx.Response(200, content=body.encode(), headers={"content-type": "text/event-stream"})


@pytest.mark.parametrize("noise", ["event: ping\n\n", "data:\n\n", "data: \n\n", "retry: 1000\n\n", ": comment\n\n",
                                   "id: 7\n\n"])
async def test_events_without_data_are_skipped(noise):
    body = noise + text_sse("hello").replace("data: [DONE]", noise + "data:  [DONE] ")
    turn, _ = await assemble(event_stream(body))
    assert turn.content == "hello"


@pytest.mark.parametrize("error_event", [
    'data: {"object": "error", "message": "upstream overloaded", "code": 500}\n\n',
    'event: error\ndata: {"message": "upstream overloaded", "code": 500}\n\n',
    'data: {"error": {"message": "upstream overloaded", "code": 500}}\n\n',
])
async def test_every_error_shape_in_a_stream_fails_the_turn(error_event):
    body = sse(chunk({"content": "Partial"}), done=False) + error_event + "data: [DONE]\n\n"
    with pytest.raises(ServerError, match="upstream overloaded"):
        await assemble(event_stream(body))


async def test_non_streamed_json_completion_is_used_as_one_chunk():
    completion = {"id": "x", "object": "chat.completion", "choices": [{"index": 0, "finish_reason": "tool_calls",
                  "message": {"role": "assistant", "content": "Let me look.", "tool_calls": [
                      {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]}}],
                  "usage": {"total_tokens": 5}}
    turn, _ = await assemble(httpx.Response(200, json=completion))
    assert turn.content == "Let me look." and turn.usage == {"total_tokens": 5}
    assert [(c.id, c.name, c.arguments) for c in turn.tool_calls] == [("call_1", "f", '{"a": 1}')]


@pytest.mark.parametrize(("response", "message"), [
    (httpx.Response(200, json={"error": {"message": "model 'foo' not found"}}), "model 'foo' not found"),
    # A login or proxy page, or nothing at all, is named as such (issue 10 item 2)
    (httpx.Response(200, html="<html><title>Please log in</title></html>"), "HTML page .*Please log in"),
    (event_stream("<!DOCTYPE html><html><head><title>Sign in</title></head></html>\n"), "HTML page .*Sign in"),
    (httpx.Response(200, content=b"", headers={"content-type": "text/event-stream"}), "empty body"),
    (httpx.Response(200, content=b""), "empty body"),
    (httpx.Response(200, content=b"  ", headers={"content-type": "application/json"}), "empty body"),
    (httpx.Response(200, json={"hello": "world"}), "neither a stream nor a completion"),
    (event_stream("data: [DONE]\n\n"), "without sending a single chunk"),
    (event_stream(": ping\n\n"), "without sending a single chunk"),
    (httpx.Response(200, text="Unauthorized: sign in first"), "text that is not an event stream.*Unauthorized"),
    (event_stream("data: {not json\n\n"), "not JSON"),
])
async def test_a_200_without_an_answer_is_an_error(response, message):
    with pytest.raises(ServerError, match=message):
        await assemble(response)


async def items_of(body: str) -> list:
    c = ChatClient(ClientSettings(base_url=BASE, model="m", api_key="k", max_retries=0))
    with respx.mock() as mock:
        mock.post(URL).mock(return_value=event_stream(body))
        try:
            return [item async for item in c.stream([user_message("x")])]
        finally:
            await c.aclose()


def turn_of(items: list):
    acc = StreamAccumulator()
    for item in items:
        if isinstance(item, dict):
            acc.feed(item)
    return acc.finish()[0]


# A provider sent one `data:` line holding a chunk cut mid-JSON and, on the same line,
# the next `data: {…}` frame; crow stopped the run ("not JSON"). Every complete frame is recovered. (issue 10 item 2)
@pytest.mark.parametrize("glue", ["", " ", "\n"])
async def test_a_damaged_event_keeps_the_frames_after_an_embedded_data_marker(glue):
    cut = json.dumps(chunk({"content": " wor"}))[:25]
    # glue "\n": the next frame is the event's second data: line (joined to the first with a line break)
    body = (sse(chunk({"content": "Hello"}), done=False) + f"data: {cut}{glue}data: "
            + json.dumps(chunk({"content": " world"})) + "\n\n" + sse(chunk({}, "stop")))
    items = await items_of(body)
    warnings = [i for i in items if isinstance(i, WarningEvent)]
    assert len(warnings) == 1 and "damaged" in warnings[0].message and "recovered 1 frame" in warnings[0].message
    turn = turn_of(items)
    assert turn.content == "Hello world" and turn.finish_reason == "stop" and "finish-missing" not in turn.rules


async def test_a_damaged_event_with_two_frames_after_it_keeps_both():
    frames = "".join(f"data: {json.dumps(chunk({'content': t}))}" for t in (" a", " b"))
    body = sse(chunk({"content": "x"}), done=False) + 'data: {"choices": [{"del' + frames + "\n\n" + \
        sse(chunk({}, "stop"))
    items = await items_of(body)
    assert turn_of(items).content == "x a b"
    assert sum(isinstance(i, WarningEvent) for i in items) == 1


async def test_a_damaged_event_followed_by_a_valid_one_is_skipped_with_one_warning():
    body = sse(chunk({"content": "Hel"}), done=False) + 'data: {"choices": [{"delta": {"cont\n\n' + \
        sse(chunk({"content": "lo"}), chunk({}, "stop"))
    items = await items_of(body)
    warnings = [i for i in items if isinstance(i, WarningEvent)]
    assert len(warnings) == 1 and "not JSON" in warnings[0].message
    assert turn_of(items).content == "Hello"


async def test_a_frame_whose_text_holds_data_marker_is_not_split():
    text = 'see "data: {}" here'
    body = sse(chunk({"content": "a"}), done=False) + "data: {cut data: " + json.dumps(chunk({"content": text})) \
        + "\n\n" + sse(chunk({}, "stop"))
    assert turn_of(await items_of(body)).content == "a" + text


async def test_a_damaged_event_at_the_end_of_the_body_is_a_cut_stream():
    body = sse(chunk({"content": "Hel"}), done=False) + 'data: {"choices": [{"delta": {"content": "lo\n\n'
    with pytest.raises(ServerError, match="not JSON"):
        await items_of(body)


async def test_api_key_beats_a_configured_authorization_header():
    _, route = await assemble(event_stream(text_sse("ok")), headers={"Authorization": "Basic abc"})
    assert route.calls[0].request.headers["authorization"] == "Bearer k"


async def test_configured_authorization_header_is_sent_without_a_key():
    c = ChatClient(ClientSettings(base_url=BASE, model="m", max_retries=0, headers={"Authorization": "Basic abc"}))
    with respx.mock() as mock:
        route = mock.post(URL).mock(return_value=event_stream(text_sse("ok")))
        [_ async for _ in c.stream([user_message("x")])]
    assert route.calls[0].request.headers["authorization"] == "Basic abc"


async def test_tool_calls_in_one_chunk_with_the_finish():
    turn, _ = await assemble(event_stream(sse(chunk({"tool_calls": [tool_delta(0, "c", "f", "{}")]}, "tool_calls"))))
    assert json.loads(turn.tool_calls[0].arguments) == {}


# found trying it as a new user (fourth round): valid JSON that is not an object reached the loop as an event
@pytest.mark.parametrize("data", ["[1, 2]", '"hi"', "5", "null", "true"])
async def test_a_chunk_that_is_not_an_object_is_skipped_with_one_warning(data):
    body = sse(chunk({"content": "Hel"}), done=False) + f"data: {data}\n\n" + sse(chunk({"content": "lo"}),
                                                                                 chunk({}, "stop"))
    items = await items_of(body)
    warnings = [i for i in items if isinstance(i, WarningEvent)]
    assert len(warnings) == 1 and "not a JSON object" in warnings[0].message
    assert all(isinstance(i, (dict, WarningEvent)) for i in items)
    assert turn_of(items).content == "Hello"


# issue: ~300 KB of gzip on the wire became 1-1.6 GB in one SSE event; decoded bytes per event are capped
async def test_a_gzip_bomb_in_one_event_is_a_one_line_error():
    import gzip

    from crow_cli.wire.body import MAX_EVENT_BYTES

    body = gzip.compress(b'data: {"choices": [{"index": 0, "delta": {"content": "' + b"a" * (MAX_EVENT_BYTES + 10)
                         + b'"}}]}\n\ndata: [DONE]\n\n')
    assert len(body) < MAX_EVENT_BYTES // 100
    response = httpx.Response(200, stream=httpx.ByteStream(body), headers={"content-type": "text/event-stream",
                                                                          "content-encoding": "gzip"})
    with pytest.raises(ServerError, match=r"sent an event of over 8 MiB \(decoded\); not read further$"):
        await assemble(response)


async def test_a_huge_non_streamed_completion_is_a_one_line_error():
    import gzip

    from crow_cli.wire.body import MAX_BODY_BYTES

    body = gzip.compress(b'{"choices": [{"index": 0, "message": {"content": "' + b"a" * MAX_BODY_BYTES + b'"}}]}')
    response = httpx.Response(200, stream=httpx.ByteStream(body), headers={"content-type": "application/json",
                                                                          "content-encoding": "gzip"})
    with pytest.raises(ServerError, match=r"sent a completion of over 16 MiB \(decoded\)"):
        await assemble(response)


# found by the mutation property test: a body starting with a UTF-8 byte order mark lost its first chunk
# silently (the first line's field name became "\ufeffdata"); the SSE spec's UTF-8 decode strips it
@pytest.mark.parametrize("split", [0, 1, 2, 3])
async def test_a_byte_order_mark_before_the_first_event_is_not_part_of_it(split):
    body = b"\xef\xbb\xbf" + text_sse("hello world").encode()

    async def parts():
        yield body[:split]
        yield body[split:]

    from crow_cli.wire.stream import iter_chunks

    items = [item async for item in iter_chunks(parts(), "text/event-stream")]
    assert turn_of(items).content == "hello world"


# found trying it as a new user (wave 3): one event nested 100,000 deep (`"x": [[[…]]]`) ended the run with
# `crow: internal error: RecursionError`; it is a damaged event like any other
async def test_an_event_nested_deeper_than_the_parser_goes_is_skipped_with_a_warning():
    deep = "[" * 100_000 + "]" * 100_000
    body = f'data: {{"choices": [], "x": {deep}}}\n\n' + sse(chunk({"content": "lo"}), chunk({}, "stop"))
    items = await items_of(body)
    warnings = [i.message for i in items if isinstance(i, WarningEvent)]
    assert len(warnings) == 1 and warnings[0].startswith("the server sent an event that is not JSON")
    assert turn_of(items).content == "lo"
