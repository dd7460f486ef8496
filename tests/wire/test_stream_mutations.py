"""Property: every conformance case, mutated the ways real servers and networks mutate streams, ends in
a correct result or one clear error line, never an internal error or a hang, and keeps the history contract.

issue: a mutation run over the corpus (1,600 streams re-chunked, re-enveloped, cut, given wrong-typed
fields) found internal errors; this is that run, in-process (the real client and loop, respx on the wire).

Mutations that keep a stream's meaning (the same calls, ids and text must come out as from the case
itself): arguments re-chunked, text deltas split or merged, SSE comments / `event:` / `id:` / `retry:`
lines, `data:` without its space, a byte order mark before the body, CR or CRLF line endings,
`[DONE]` dropped or repeated, `finish_reason` dropped or repeated,
id / type / name repeated on continuations (the same value, null or `""`), the body split into
network reads at random byte offsets (mid UTF-8 too). Mutations that break it: a field given a wrong
type, the connection cut at a random byte; then only the invariants hold (a result or one crow error
line, the history contract in every request, every id sent back is one the stream gave, or `""`).

CI runs a fixed number of examples with a fixed seed; `CROW_MUTATION_EXAMPLES=2000` runs more.
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
from collections.abc import AsyncIterator, Callable
from typing import Any
from unittest import mock

import httpx
import respx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crow_cli.events import RunFinished, TurnFinished
from crow_cli.history import user_message
from crow_cli.loop import LoopSettings, react
from crow_cli.tools.registry import ToolRegistry
from crow_cli.tools.tool import Tool
from crow_cli.wire.client import ChatClient, ClientSettings
from tests.support import CaseReplay, load_cases

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
