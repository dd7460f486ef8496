"""The stream reader (`wire/stream`): SSE bodies as servers and networks really send them.

Properties guarded here:

- after `data: [DONE]` the rest of the body is read, so the connection goes back to the pool (keep-alive);
- every conformance case, mutated the ways real servers and networks mutate streams, ends in a correct result
  or one clear error line, never an internal error or a hang, and keeps the history contract. Mutations that
  keep a stream's meaning (the same calls, ids and text must come out): arguments re-chunked, text deltas
  split or merged, SSE comments / `event:` / `id:` / `retry:` lines, `data:` without its space, a byte order
  mark, CR or CRLF line endings, `[DONE]` dropped or repeated, `finish_reason` dropped or repeated, id / type
  / name repeated on continuations (the same value, null or `""`), the body split into network reads at
  random byte offsets (mid UTF-8 too). Mutations that break it: a field given a wrong type, the connection
  cut at a random byte; then only the invariants hold (a result or one crow error line, the history contract
  in every request, every id sent back is one the stream gave, or `""`). CI runs a fixed number of examples
  with a fixed seed; `CROW_MUTATION_EXAMPLES=2000` runs more (a mutation run over the corpus once found
  internal errors);
- response shapes beyond the corpus: SSE events without data, other error shapes, non-SSE 200s.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import itertools
import json
import os
import random
import tempfile
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from unittest import mock

import httpx
import pytest
import respx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crow_cli.errors import ServerError
from crow_cli.events import RunFinished, TurnFinished, WarningEvent
from crow_cli.history import user_message
from crow_cli.loop import LoopSettings, react
from crow_cli.tools.registry import ToolRegistry
from crow_cli.tools.tool import Tool
from crow_cli.wire.accumulate import StreamAccumulator
from crow_cli.wire.client import ChatClient, ClientSettings
from tests.replay_server import ReplayServer
from tests.support import (
    CaseReplay,
    chunk,
    crow,
    load_cases,
    raw_http_server,
    run_args,
    script,
    sse,
    text_sse,
    tool_delta,
)


# A tool turn and its answer share one connection: the stream reads on past `data: [DONE]` to the body's end,
# so the connection goes back to the pool instead of being closed
def test_a_tool_turn_and_its_answer_share_one_connection(tmp_path: Path) -> None:
    with ReplayServer(script([("l1", "list_directory", {})], final="Done.")) as server:
        peers: list[Any] = []
        accept = server.httpd.process_request  # socketserver's public hook, once per accepted connection

        def counting(request: Any, client_address: Any) -> None:
            peers.append(client_address)
            accept(request, client_address)

        server.httpd.process_request = counting  # type: ignore[method-assign]
        proc = crow(*run_args(server, "--yes", "go"), cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (0, "Done.\n"), proc.stderr
    assert len(server.requests) == 2 and len(peers) == 1, peers


def test_a_body_held_open_after_done_does_not_hold_up_the_turn(tmp_path: Path) -> None:
    released = threading.Event()

    def done_then_hold(handler: Any) -> None:  # the terminating chunk comes only once crow has finished
        handler.protocol_version = "HTTP/1.1"
        handler.send_response(200)
        handler.send_header("content-type", "text/event-stream")
        handler.send_header("transfer-encoding", "chunked")
        handler.end_headers()
        data = text_sse("Hi there.").encode()
        handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        handler.wfile.flush()
        released.wait(120)
        handler.wfile.write(b"0\r\n\r\n")

    with raw_http_server(done_then_hold) as base_url:
        try:
            proc = crow("run", "--base-url", base_url, "--api-key", "sk-test", "--model", "m", "--no-tools", "hi",
                        cwd=tmp_path)
        finally:
            released.set()
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "Hi there.\n", "")


# A body kept open after [DONE] costs at most one grace (0.5 s): once one was still open after the grace,
# later turns of the same client close it at once (and a server that ends its bodies keeps the reuse)
async def test_a_body_left_open_after_done_is_closed_at_once_on_later_turns() -> None:
    import asyncio

    from crow_cli.wire.stream import AfterDone, iter_chunks

    read_after_done: list[bool] = []

    async def held_open():  # type: ignore[no-untyped-def]
        yield text_sse("Hi.").encode()  # ends with data: [DONE]
        read_after_done.append(True)
        await asyncio.Event().wait()  # the body never ends

    after = AfterDone(grace_s=0.01)
    assert [c async for c in iter_chunks(held_open(), "text/event-stream", after)]
    assert read_after_done == [True] and after.grace_s == 0  # it waited once, and learned
    read_after_done.clear()
    assert [c async for c in iter_chunks(held_open(), "text/event-stream", after)]
    assert read_after_done == []  # closed at once: the rest of the body was never asked for

BASE = "http://llm.test/v1"
URL = f"{BASE}/chat/completions"
CASES = load_cases()
EXAMPLES = int(os.environ.get("CROW_MUTATION_EXAMPLES") or 100)

Outcome = tuple[str, list[tuple[str | None, list[tuple[str, str, str]]]]]
"""A run's final status and, per model turn, its text and its calls (id, name, arguments)."""


# --- the stream as events of lines -------------------------------------------------------------------

def events_of(body: str) -> list[list[str]]:
    """An SSE body as its events, each a list of lines (line endings normalised)."""
    text = body.replace("\r\n", "\n").replace("\r", "\n")
    return [event.split("\n") for event in text.split("\n\n") if event.strip("\n")]


def body_of(events: list[list[str]], newline: str) -> str:
    return "".join(newline.join(lines) + newline * 2 for lines in events)


def chunk_in(lines: list[str]) -> dict[str, Any] | None:
    """The chunk of an event holding one `data:` line of a JSON object, else None (left alone)."""
    data = [line for line in lines if line.startswith("data:")]
    if len(data) != 1 or any(line.startswith("event:") and "error" in line for line in lines):
        return None
    try:
        value = json.loads(data[0][5:])
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def event(chunk: dict[str, Any]) -> list[str]:
    return [f"data: {json.dumps(chunk)}"]


def only_choice(chunk: dict[str, Any]) -> dict[str, Any] | None:
    choices = chunk.get("choices")
    if isinstance(choices, list) and len(choices) == 1 and isinstance(choices[0], dict) \
            and isinstance(choices[0].get("delta"), dict):
        return choices[0]
    return None


def with_delta(chunk: dict[str, Any], delta: dict[str, Any], finish: Any = None) -> dict[str, Any]:
    """A copy of `chunk` whose only choice has `delta` and `finish_reason` `finish`."""
    out = dict(chunk)
    choice = dict(chunk["choices"][0])
    choice["delta"], choice["finish_reason"] = delta, finish
    out["choices"] = [choice]
    out.pop("usage", None)
    return out


# --- meaning-preserving mutations of the events -----------------------------------------------------

def rechunk_arguments(events: list[list[str]], rng: random.Random) -> list[list[str]]:
    """Split a call's arguments fragment over several chunks (continuations carry index + arguments)."""
    out: list[list[str]] = []
    joined: dict[int, str] = {}
    for lines in events:
        chunk = chunk_in(lines)
        choice = only_choice(chunk) if chunk else None
        calls = choice["delta"].get("tool_calls") if choice else None
        entry = calls[0] if isinstance(calls, list) and len(calls) == 1 and isinstance(calls[0], dict) else None
        fn = entry.get("function") if entry else None
        index = entry.get("index") if entry else None
        args = fn.get("arguments") if isinstance(fn, dict) else None
        if entry is None or not isinstance(index, int) or isinstance(index, bool) or not isinstance(args, str):
            out.append(lines)
            continue
        if entry.get("id") and fn.get("name"):
            joined[index] = ""  # a new call (Ollama sends each at index 0)
        repeat = args == joined.get(index, "") and args  # a final-chunk flush of the whole arguments
        joined[index] = joined.get(index, "") + args
        if repeat or len(args) < 2 or rng.random() < 0.3:
            out.append(lines)
            continue
        cuts = sorted(rng.sample(range(1, len(args)), min(len(args) - 1, rng.randint(1, 3))))
        pieces = [args[a:b] for a, b in zip([0, *cuts], [*cuts, len(args)], strict=True)]
        assert chunk is not None and choice is not None
        for n, piece in enumerate(pieces):
            head = {**entry, "function": {**fn, "arguments": piece}} if n == 0 else \
                {"index": index, "function": {"arguments": piece}}
            delta = {**choice["delta"], "tool_calls": [head]} if n == 0 else {"tool_calls": [head]}
            if n < len(pieces) - 1:
                out.append(event(with_delta(chunk, delta)))
            else:  # the last piece keeps what the chunk carried besides the delta
                out.append(event({**with_delta(chunk, delta, choice.get("finish_reason")),
                                  **{k: v for k, v in chunk.items() if k == "usage"}}))
    return out


def text_only(chunk: dict[str, Any] | None) -> str | None:
    """The content of a chunk that carries nothing else (one choice, no finish, no usage)."""
    choice = only_choice(chunk) if chunk else None
    if choice is None or choice.get("finish_reason") or set(choice["delta"]) - {"content", "role"} \
            or (chunk or {}).get("usage"):
        return None
    content = choice["delta"].get("content")
    return content if isinstance(content, str) else None


def split_text(events: list[list[str]], rng: random.Random) -> list[list[str]]:
    """Split text deltas in two (surrogate halves may part: servers do that)."""
    out: list[list[str]] = []
    for lines in events:
        chunk = chunk_in(lines)
        text = text_only(chunk)
        if chunk is None or text is None or len(text) < 2 or rng.random() < 0.5:
            out.append(lines)
            continue
        at = rng.randrange(1, len(text))
        first = with_delta(chunk, {**chunk["choices"][0]["delta"], "content": text[:at]})
        out += [event(first), event(with_delta(chunk, {"content": text[at:]}))]
    return out


def merge_text(events: list[list[str]], rng: random.Random) -> list[list[str]]:
    """Merge consecutive text deltas into one."""
    out: list[list[str]] = []
    for lines in events:
        chunk = chunk_in(lines)
        text = text_only(chunk)
        before = text_only(chunk_in(out[-1])) if out else None
        if chunk is not None and text is not None and before is not None and rng.random() < 0.7:
            previous = chunk_in(out[-1])
            assert previous is not None
            out[-1] = event(with_delta(previous, {**previous["choices"][0]["delta"], "content": before + text}))
            continue
        out.append(lines)
    return out


def repeat_headers(events: list[list[str]], rng: random.Random) -> list[list[str]]:
    """Give continuation deltas the call's id, type and name again: the same value, null or `""`."""
    out: list[list[str]] = []
    known: dict[int, tuple[str, str]] = {}  # index -> (id, name as assembled so far)
    for lines in events:
        chunk = chunk_in(lines)
        choice = only_choice(chunk) if chunk else None
        calls = choice["delta"].get("tool_calls") if choice else None
        if chunk is None or not isinstance(calls, list) or not calls:
            out.append(lines)
            continue
        changed = False
        for entry in calls:
            index = entry.get("index") if isinstance(entry, dict) else None
            if not isinstance(index, int) or isinstance(index, bool):
                continue
            fn = entry.get("function") if isinstance(entry.get("function"), dict) else {}
            name = fn.get("name") if isinstance(fn.get("name"), str) else ""
            if entry.get("id") and name:
                known[index] = (entry["id"], name)
                continue
            old_id, old_name = known.get(index, ("", ""))
            if name and old_name and name != old_name:
                known[index] = (old_id, old_name + name)  # a name in pieces
                continue
            if "id" not in entry and rng.random() < 0.6:
                entry["id"] = rng.choice([old_id, None, ""]) if old_id else rng.choice([None, ""])
                changed = True
            if "type" not in entry and rng.random() < 0.5:
                entry["type"] = rng.choice(["function", None, ""])
                changed = True
            if "name" not in fn and rng.random() < 0.5:
                entry["function"] = {**fn, "name": rng.choice([old_name, None, ""]) if old_name
                                     else rng.choice([None, ""])}
                changed = True
        out.append(event(chunk) if changed else lines)
    return out


def finish_chunks(events: list[list[str]], rng: random.Random) -> list[list[str]]:
    """Repeat the chunk that carries finish_reason, or drop the finish_reason from it."""
    out: list[list[str]] = []
    for lines in events:
        chunk = chunk_in(lines)
        choice = only_choice(chunk) if chunk else None
        if chunk is None or choice is None or not choice.get("finish_reason"):
            out.append(lines)
            continue
        if rng.random() < 0.5:
            out += [lines, event(with_delta(chunk, {}, choice["finish_reason"]))]
        else:
            out.append(event(with_delta(chunk, choice["delta"], None) | {k: v for k, v in chunk.items()
                                                                          if k == "usage"}))
    return out


def envelope_noise(events: list[list[str]], rng: random.Random) -> list[list[str]]:
    """SSE lines that carry no data: comments, `event:`, `id:` and `retry:` lines, events of their own."""
    noise = [": keep-alive", ": OPENROUTER PROCESSING", "retry: 1000", "id: 42", "event: ping"]
    out: list[list[str]] = []
    for lines in events:
        if rng.random() < 0.3:
            out.append([rng.choice(noise)])
        if rng.random() < 0.3 and not any(line.startswith("event:") for line in lines):
            lines = [rng.choice(["event: message", "id: 7", ": note", "retry: 3000"]), *lines]
        out.append(lines)
    return out


def done_markers(events: list[list[str]], rng: random.Random) -> list[list[str]]:
    """Drop `[DONE]` or send it twice."""
    done = [n for n, lines in enumerate(events) if lines == ["data: [DONE]"]]
    if not done:
        return events
    if rng.random() < 0.5:
        return [lines for n, lines in enumerate(events) if n not in done]
    return [*events, ["data: [DONE]"]]


def bare_data_fields(events: list[list[str]], rng: random.Random) -> list[list[str]]:
    """`data:{…}` without the space (the SSE spec strips one space, if any)."""
    return [[line.replace("data: ", "data:", 1) if rng.random() < 0.5 else line for line in lines]
            for lines in events]


def byte_order_mark(events: list[list[str]], rng: random.Random) -> list[list[str]]:
    """A UTF-8 byte order mark before the body (added in `Plan.apply`; the SSE spec's decode drops it)."""
    return events


KEEPING: dict[str, Callable[[list[list[str]], random.Random], list[list[str]]]] = {
    "rechunk_arguments": rechunk_arguments, "split_text": split_text, "merge_text": merge_text,
    "repeat_headers": repeat_headers, "finish_chunks": finish_chunks, "envelope_noise": envelope_noise,
    "done_markers": done_markers, "bare_data_fields": bare_data_fields, "byte_order_mark": byte_order_mark,
}


# --- mutations that break the stream's meaning ------------------------------------------------------

WRONG = ["", "x", -1, 0.5, True, [1], {"a": 1}]


def wrong_types(events: list[list[str]], rng: random.Random) -> list[list[str]]:
    """Give one field of one chunk a value of another type."""
    found = [(n, chunk) for n, lines in enumerate(events) if (chunk := chunk_in(lines)) is not None]
    if not found:
        return events
    n, chunk = rng.choice(found)
    places: list[tuple[dict[str, Any], str]] = [(chunk, "choices"), (chunk, "usage"), (chunk, "error")]
    for choice in chunk.get("choices") or []:
        if isinstance(choice, dict):
            places += [(choice, "index"), (choice, "delta"), (choice, "finish_reason")]
            delta = choice.get("delta")
            if isinstance(delta, dict):
                places += [(delta, "content"), (delta, "tool_calls"), (delta, "refusal"), (delta, "role")]
                for entry in delta.get("tool_calls") or []:
                    if isinstance(entry, dict):
                        places += [(entry, "index"), (entry, "id"), (entry, "type"), (entry, "function")]
                        if isinstance(entry.get("function"), dict):
                            places += [(entry["function"], "name"), (entry["function"], "arguments")]
    owner, key = rng.choice(places)
    owner[key] = copy.deepcopy(rng.choice(WRONG))
    return [*events[:n], event(chunk), *events[n + 1:]]


# --- the body as network reads ------------------------------------------------------------------------

class Reads(httpx.AsyncByteStream):
    """The body in pieces cut at `offsets` (bytes); the connection breaks at byte `cut`, if given."""

    def __init__(self, body: bytes, offsets: list[int], cut: int | None) -> None:
        self.body, self.offsets, self.cut = body, offsets, cut

    async def __aiter__(self) -> AsyncIterator[bytes]:
        end = len(self.body) if self.cut is None else self.cut
        bounds = [0, *(o for o in self.offsets if 0 < o < end), end]
        for a, b in itertools.pairwise(bounds):
            if b > a:
                yield self.body[a:b]
        if self.cut is not None:
            raise httpx.RemoteProtocolError("peer closed connection without sending complete message body")


class MutatedReplay(CaseReplay):
    """A case's replay whose streamed answers are mutated, each differently (a cut only once per answer)."""

    def __init__(self, case: dict[str, Any], plan: Plan) -> None:
        super().__init__(case)
        self.plan = plan
        self.answers = 0
        self.sent: list[str] = []
        """The (mutated) bodies answered, in order."""

    def __call__(self, request: httpx.Request) -> httpx.Response:
        response = super().__call__(request)
        if response.status_code == 500 and b"replay script exhausted" in response.content:
            return httpx.Response(400, json={"error": {"message": "replay script exhausted"}})  # no retries
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            return response
        self.answers += 1
        body, offsets, cut = self.plan.apply(response.content.decode("utf-8"), self.answers)
        self.sent.append(body.decode())
        return httpx.Response(200, stream=Reads(body, offsets, cut), headers={"content-type": "text/event-stream"})


class Plan:
    """The mutations of one example, drawn by hypothesis: their names, a seed, and whether to cut."""

    def __init__(self, names: list[str], wrong: int, newline: str, seed: int, reads: int, cut: float | None
                 ) -> None:
        self.names, self.wrong, self.newline, self.seed, self.reads, self.cut = names, wrong, newline, seed, reads, cut

    @property
    def keeps_meaning(self) -> bool:
        return not self.wrong and self.cut is None

    def apply(self, body: str, answer: int) -> tuple[bytes, list[int], int | None]:
        rng = random.Random(self.seed * 1000 + answer)
        events = events_of(body)
        for name in self.names:
            events = KEEPING[name](events, rng)
        for _ in range(self.wrong):
            events = wrong_types(events, rng)
        data = ("\ufeff" if "byte_order_mark" in self.names else "").encode() + body_of(events, self.newline).encode()
        offsets = sorted(rng.sample(range(1, len(data)), min(self.reads, len(data) - 1))) if len(data) > 1 else []
        cut = int(self.cut * len(data)) if self.cut is not None and answer == 1 else None
        return data, offsets, cut

    def __repr__(self) -> str:
        return (f"Plan({self.names}, wrong={self.wrong}, newline={self.newline!r}, seed={self.seed}, "
                f"reads={self.reads}, cut={self.cut})")


plans = st.builds(
    Plan,
    st.lists(st.sampled_from(list(KEEPING)), max_size=4),
    st.sampled_from([0, 0, 1, 2]),  # wrong-typed fields: half the examples have some
    st.sampled_from(["\n", "\r\n", "\r"]),
    st.integers(0, 2**32),
    st.integers(0, 40),
    st.none() | st.floats(0, 0.999),
)


# --- running a case -----------------------------------------------------------------------------------

async def _ran(name: str, **_: object) -> str:
    return f"ran {name}"


def registry_for(case: dict[str, Any]) -> ToolRegistry:
    registry = ToolRegistry()
    for name in sorted({c["function"]["name"] for c in case["expected"].get("tool_calls") or []}):
        registry.register(Tool(name, "stub", functools.partial(_ran, name), parameters={"type": "object"}))
    return registry


def stream_ids(bodies: list[str]) -> set[str]:
    """Every tool-call id the streams carry (an id may only come back unchanged, or as `""`)."""
    found = {""}

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if isinstance(value.get("id"), str) and ("function" in value or "index" in value):
                found.add(value["id"])
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for body in bodies:
        for line in body.replace("\r", "\n").split("\n"):
            for part in line.split("data:")[1:]:
                try:
                    walk(json.loads(part))
                except ValueError:
                    continue
    return found


async def play(case: dict[str, Any], replay: CaseReplay) -> tuple[Outcome, list[Any]]:
    c = ChatClient(ClientSettings(base_url=BASE, model="test-model", api_key="sk-test", max_retries=2))
    events: list[Any] = []
    try:
        # each run learns nothing from the one before (wire.facts remembers per base URL and model)
        with tempfile.TemporaryDirectory() as state, mock.patch.dict(os.environ, {"XDG_STATE_HOME": state}), \
                respx.mock(assert_all_called=False) as respx_mock:
            respx_mock.post(URL).mock(side_effect=replay)
            async with asyncio.timeout(60):  # a hang, not a margin: a run takes milliseconds
                async for item in react([user_message("Please use the tools you need.")], c, registry_for(case),
                                        LoopSettings(max_turns=4)):
                    events.append(item)
    finally:
        await c.aclose()
    finished = events[-1]
    assert isinstance(finished, RunFinished)
    turns = [(e.content, [(call.id, call.name, call.arguments) for call in e.tool_calls])
             for e in events if isinstance(e, TurnFinished)]
    return (finished.status, turns), events


@functools.cache
def original(case_id: str) -> Outcome:
    case = next(c for c in CASES if c["id"] == case_id)
    outcome, _ = asyncio.run(play(case, CaseReplay(case)))
    return outcome


@settings(max_examples=EXAMPLES, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.sampled_from(CASES), plans)
def test_a_mutated_stream_ends_in_a_result_or_one_error_line(case: dict[str, Any], plan: Plan) -> None:
    replay = MutatedReplay(case, plan)
    outcome, events = asyncio.run(play(case, replay))
    finished = events[-1]
    assert finished.status in ("completed", "error", "max_turns"), finished
    if finished.error:
        assert "\n" not in finished.error and "internal error" not in finished.error, finished.error
    assert replay.history_errors == []
    ids = stream_ids(replay.sent)
    for body in replay.bodies:
        for message in body["messages"]:
            sent = [c["id"] for c in message.get("tool_calls") or []] + \
                ([message["tool_call_id"]] if message.get("role") == "tool" else [])
            assert set(sent) <= ids, (sent, ids)
    if plan.keeps_meaning:
        assert outcome == original(case["id"])

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
    # A login or proxy page, or nothing at all, is named as such
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


# One `data:` line holding a chunk cut mid-JSON and, on the same line, the next `data: {…}` frame does not stop
# the run ("not JSON"): every complete frame is recovered.
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


# Valid JSON that is not an object is skipped with one warning, never reaching the loop as an event
@pytest.mark.parametrize("data", ["[1, 2]", '"hi"', "5", "null", "true"])
async def test_a_chunk_that_is_not_an_object_is_skipped_with_one_warning(data):
    body = sse(chunk({"content": "Hel"}), done=False) + f"data: {data}\n\n" + sse(chunk({"content": "lo"}),
                                                                                 chunk({}, "stop"))
    items = await items_of(body)
    warnings = [i for i in items if isinstance(i, WarningEvent)]
    assert len(warnings) == 1 and "not a JSON object" in warnings[0].message
    assert all(isinstance(i, (dict, WarningEvent)) for i in items)
    assert turn_of(items).content == "Hello"


# Decoded bytes per SSE event are capped: ~300 KB of gzip on the wire cannot become 1-1.6 GB in one event
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


# A UTF-8 byte order mark before the first event is stripped, as the SSE spec's UTF-8 decode does: the first
# chunk is kept (its field name never becomes "\ufeffdata")
@pytest.mark.parametrize("split", [0, 1, 2, 3])
async def test_a_byte_order_mark_before_the_first_event_is_not_part_of_it(split):
    body = b"\xef\xbb\xbf" + text_sse("hello world").encode()

    async def parts():
        yield body[:split]
        yield body[split:]

    from crow_cli.wire.stream import iter_chunks

    items = [item async for item in iter_chunks(parts(), "text/event-stream")]
    assert turn_of(items).content == "hello world"


# One event nested 100,000 deep (`"x": [[[…]]]`) is a damaged event like any other, skipped with a warning,
# never `crow: internal error: RecursionError`
async def test_an_event_nested_deeper_than_the_parser_goes_is_skipped_with_a_warning():
    deep = "[" * 100_000 + "]" * 100_000
    body = f'data: {{"choices": [], "x": {deep}}}\n\n' + sse(chunk({"content": "lo"}), chunk({}, "stop"))
    items = await items_of(body)
    warnings = [i.message for i in items if isinstance(i, WarningEvent)]
    assert len(warnings) == 1 and warnings[0].startswith("the server sent an event that is not JSON")
    assert turn_of(items).content == "lo"
