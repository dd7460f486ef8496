"""The react loop through the real client (respx on the wire) with real tools.

Properties guarded here:

- tool calls run concurrently; their results join the history in call order, each as soon as every call
  before it has one; every failure is a tool result;
- the run ends with exactly one `RunFinished`: completed (the answer), max_turns (after `max_turns` turns),
  error (a one-line error, counting the turns that finished), cancelled;
- a failed generation (`tool_use_failed`) is asked for again the same request, with its own bound;
- a tool name with a leaked template token or namespace prefix is taken as the tool it names;
- each assistant message records its author, which never reaches the wire;
- cancelled, the loop closes the history: finished calls keep their results, the others are answered
  "cancelled" in call order, a partial answer of the last attempt is kept with the canceller's note (none
  when the turn has tool calls); a consumer that stops listening leaves a valid history too;
- images a tool returns reach the model: a user message of `image_url` parts right after the turn's tool
  messages (Chat Completions tool messages carry text only);
- a turn whose stream was cut is asked for once more, from the same history, with a notice;
- after any sequence of faults and cancellations the history satisfies the contract (a property test):
  several runs share one history (as a chat session does); each model turn is scripted (text, tool calls
  with ids repeated or `""`, tools that fail, time out or are unknown, a stream cut mid-way, a server
  error) and the run may be cancelled after any event; after each run, as the loop left it (nothing
  repaired by the caller), the history keeps the contract ../shared/conformance/run.py checks
  (`replay_server.history_violations`) with no call left unanswered, and so does every request.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from contextlib import aclosing
from typing import Any

import httpx
import pytest
import respx
from hypothesis import given, settings
from hypothesis import strategies as st

from crow_cli.errors import StreamCut
from crow_cli.events import (
    MessageAppended,
    Notice,
    RunFinished,
    TextDelta,
    ToolCallStarted,
    ToolResultReady,
    ToolRunStarted,
    TurnFinished,
)
from crow_cli.history import Message, ToolResult, pending_tool_calls, repair_history, user_message
from crow_cli.images import Image
from crow_cli.loop import LoopSettings, react
from crow_cli.tools.approval import make_approver
from crow_cli.tools.registry import ToolRegistry
from crow_cli.tools.tool import tool
from crow_cli.wire.client import ChatClient, ClientSettings
from crow_cli.wire.protocol import ChatStream
from tests.support import ScriptedStream, assert_contract, authorless, boom, chunk, ok, slow, sse, text_sse, tool_delta

URL = "http://llm.test/v1/chat/completions"


def calls_sse(*calls: tuple[str, str, dict]) -> str:
    """A turn calling each (id, name, arguments) in parallel, arguments split in two fragments."""
    chunks = []
    for i, (cid, name, _) in enumerate(calls):
        chunks.append(chunk({"tool_calls": [tool_delta(i, cid, name, "")]}))
    for i, (_, _, args) in enumerate(calls):
        text = json.dumps(args)
        chunks.append(chunk({"tool_calls": [tool_delta(i, arguments=text[:3])]}))
        chunks.append(chunk({"tool_calls": [tool_delta(i, arguments=text[3:])]}))
    return sse(*chunks, chunk({}, "tool_calls"))


def stream(body: str) -> httpx.Response:
    return httpx.Response(200, content=body.encode(), headers={"content-type": "text/event-stream"})


async def drive(registry: ToolRegistry, responses: list[str], **settings):
    history = [user_message("go")]
    c = ChatClient(ClientSettings(base_url="http://llm.test/v1", model="m", api_key="k", max_retries=0))
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[stream(b) for b in responses])
        events = []
        async for e in react(history, c, registry, LoopSettings(**settings)):
            events.append(e)
    await c.aclose()
    return history, events, [json.loads(call.request.content) for call in route.calls]


@tool
async def nap(seconds: float) -> str:
    """Sleep.

    Args:
        seconds: how long.
    """
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


class Rendezvous:
    """Tools that each arrive, then wait until `expected` have arrived: they can only all return if they run
    at the same time. A wait longer than `hang_s` (a bound on a hang, not a margin) is an error."""

    def __init__(self, expected: int, hang_s: float = 60) -> None:
        self.expected, self.hang_s = expected, hang_s
        self.count = 0
        self.lock = threading.Lock()

    def arrive(self) -> None:
        with self.lock:
            self.count += 1

    def all_here(self) -> bool:
        with self.lock:
            return self.count >= self.expected


async def test_three_tools_run_concurrently():
    meeting = Rendezvous(3)

    @tool
    async def meet() -> str:
        """Arrive on the event loop and wait for the others."""
        meeting.arrive()
        deadline = time.monotonic() + meeting.hang_s
        while not meeting.all_here():
            if time.monotonic() > deadline:
                raise RuntimeError("the others never came: the tools ran one after another")
            await asyncio.sleep(0.01)
        return "met"

    @tool
    def sync_meet() -> str:
        """Arrive in a worker thread and wait for the others."""
        meeting.arrive()
        deadline = time.monotonic() + meeting.hang_s
        while not meeting.all_here():
            if time.monotonic() > deadline:
                raise RuntimeError("the others never came: the tools ran one after another")
            time.sleep(0.01)
        return "met"

    registry = ToolRegistry()
    registry.register(meet)
    registry.register(sync_meet)
    history, events, bodies = await drive(registry, [
        calls_sse(("a", "meet", {}), ("b", "sync_meet", {}), ("c", "meet", {})), text_sse("ok"),
    ], tool_timeout_s=120)
    assert [(m["tool_call_id"], m["content"]) for m in history[2:5]] == [("a", "met"), ("b", "met"), ("c", "met")]
    assert [m.get("tool_call_id") for m in bodies[1]["messages"][2:]] == ["a", "b", "c"]
    assert events[-1] == RunFinished("completed", "ok", 2)


async def test_results_are_in_call_order_even_when_finishing_out_of_order():
    registry = ToolRegistry()
    registry.register(nap)
    history, _, _ = await drive(registry, [
        calls_sse(("slow", "nap", {"seconds": 0.3}), ("fast", "nap", {"seconds": 0.0})), text_sse("ok")])
    assert [(m["tool_call_id"], m["content"]) for m in history[2:4]] == [("slow", "slept 0.3"), ("fast", "slept 0.0")]


async def test_every_failure_becomes_a_tool_result():
    @tool
    def boom() -> str:
        """Raise."""
        raise RuntimeError("kaput")

    @tool(timeout_s=0.1)
    async def hang() -> str:
        """Hang."""
        await asyncio.sleep(10)
        return "never"

    @tool(needs_approval=True)
    def guarded() -> str:
        """Needs approval."""
        return "ran"

    registry = ToolRegistry()
    for t in (nap, boom, hang, guarded):
        registry.register(t)
    history, events, _ = await drive(registry, [
        calls_sse(("1", "missing", {}), ("2", "nap", {"seconds": "soon"}), ("3", "boom", {}), ("4", "hang", {}),
                  ("5", "guarded", {}), ("6", "nap", {})),
        text_sse("handled"),
    ])
    results = {m["tool_call_id"]: m["content"] for m in history if m["role"] == "tool"}
    assert "unknown tool 'missing'" in results["1"] and "nap" in results["1"]
    assert "invalid arguments for nap: 'seconds': expected number, got \"soon\"" in results["2"]
    assert "RuntimeError: kaput" in results["3"]
    assert "timed out after 0.1 s" in results["4"]
    assert "needs approval" in results["5"]
    assert "invalid arguments for nap: 'seconds' is required" in results["6"]
    assert all(v.startswith("Error: ") for v in results.values())
    oks = [e.result.ok for e in events if isinstance(e, ToolResultReady)]
    assert oks == [False] * 6
    assert events[-1].status == "completed"


async def test_approver_is_asked_and_can_allow():
    @tool(needs_approval=True)
    def guarded() -> str:
        """Needs approval."""
        return "ran"

    asked = []

    async def ask(question):
        asked.append((question.call.id, question.tool.name))
        return "yes"

    approve = make_approver("ask", ask=ask)

    registry = ToolRegistry()
    registry.register(guarded)
    history = [user_message("go")]
    c = ChatClient(ClientSettings(base_url="http://llm.test/v1", model="m", api_key="k", max_retries=0))
    with respx.mock() as mock:
        mock.post(URL).mock(side_effect=[stream(calls_sse(("g1", "guarded", {}))), stream(text_sse("ok"))])
        async for _ in react(history, c, registry, approve=approve):
            pass
    assert asked == [("g1", "guarded")] and history[2]["content"] == "ran"


async def test_max_turns_stops_with_error_status():
    registry = ToolRegistry()
    registry.register(nap)
    turn = calls_sse(("x", "nap", {"seconds": 0}))
    history, events, _ = await drive(registry, [turn, turn], max_turns=2)
    assert events[-1].status == "max_turns" and "--max-turns 2" in events[-1].error and events[-1].exit_code == 1
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant", "tool"]


async def test_an_answer_the_content_filter_stopped_ends_the_run_as_an_error_with_its_partial_text():
    """A script must tell a stopped answer from a complete one: status error, exit 3, the partial text kept."""
    stopped = sse(chunk({"role": "assistant", "content": "the first half"}), chunk({}, "content_filter"))
    history, events, _ = await drive(ToolRegistry(), [stopped])
    end = events[-1]
    assert (end.status, end.final_text, end.exit_code) == ("error", "the first half", 3)
    assert "content filter" in end.error and history[-1]["content"] == "the first half"


async def test_the_same_call_four_turns_in_a_row_ends_the_run_with_every_call_answered():
    registry = ToolRegistry()
    registry.register(nap)
    turn = calls_sse(("x", "nap", {"seconds": 0}))
    history, events, _ = await drive(registry, [turn, turn, turn, turn], max_repeats=3)
    end = events[-1]
    assert (end.status, end.exit_code) == ("error", 1) and "same tool call 4 turns in a row" in end.error
    results = [m["content"] for m in history if m["role"] == "tool"]
    assert len(results) == 4 and "not run again" in results[2] and "not run again" in results[3]


async def test_a_call_left_in_the_text_runs_once_said_and_its_text_is_kept_but_never_sent():
    registry = ToolRegistry()
    registry.register(nap)
    leak = '<tool_call>{"name": "nap", "arguments": {"seconds": 0}}</tool_call>'
    history, events, bodies = await drive(registry, [text_sse(leak), text_sse(leak), text_sse("fin")])
    assistant = history[1]
    assert [(c["id"], c["function"]["name"]) for c in assistant["tool_calls"]] == [("", "nap")]
    assert assistant["crow_recovered"]["format"] == "hermes" and "nap" in assistant["crow_recovered"]["text"]
    assert all("crow_recovered" not in m for body in bodies for m in body["messages"])
    said = [e for e in events if isinstance(e, Notice) and e.code == "tool_calls_recovered"]
    assert len(said) == 1 and "hermes" in said[0].message  # once per run, not per turn
    assert history[-1]["content"] == "fin"


async def test_history_events_and_order():
    registry = ToolRegistry()
    registry.register(nap)
    history, events, _ = await drive(registry, [calls_sse(("a", "nap", {"seconds": 0})), text_sse("fin")])
    appended = [e.message for e in events if isinstance(e, MessageAppended)]
    assert appended == history[1:]
    kinds = [type(e).__name__ for e in events if not isinstance(e, MessageAppended)]
    assert kinds.index("TurnFinished") < kinds.index("ToolRunStarted") < kinds.index("ToolResultReady")
    first = next(e for e in events if isinstance(e, TurnFinished))
    assert first.finish_reason == "tool_calls" and first.tool_calls[0].id == "a"
    assert next(e for e in events if isinstance(e, ToolRunStarted)).call.id == "a"


async def test_long_tool_output_is_cut_with_a_marker():
    @tool
    def flood() -> str:
        """Lots of output."""
        return "y" * 5000

    registry = ToolRegistry()
    registry.register(flood)
    history, _, _ = await drive(registry, [calls_sse(("f", "flood", {})), text_sse("ok")], max_output_chars=100)
    assert history[2]["content"].startswith("y" * 100) and "output truncated" in history[2]["content"]


@pytest.mark.parametrize("n", [0])
async def test_no_tools_means_no_tools_field(n):
    c = ChatClient(ClientSettings(base_url="http://llm.test/v1", model="m", api_key="k", max_retries=0))
    with respx.mock() as mock:
        route = mock.post(URL).mock(return_value=stream(text_sse("hi")))
        events = [e async for e in react([user_message("x")], c, None)]
    assert "tools" not in json.loads(route.calls[0].request.content) and events[-1].final_text == "hi"


# The loop owns its history to the end: cancelled, it closes the history itself, reports how,
# and re-raises; no surface keeps its own bookkeeping of it.

class TurnStream(ChatStream):
    """A `ChatStream` serving one list of chunks per turn; a turn may stall after its chunks."""

    def __init__(self, *turns: list[dict], stall: bool = False) -> None:
        self.turns = list(turns)
        self.stall = stall
        self.stalled = asyncio.Event()
        """Set once the last turn's chunks are all sent and the stream stalls."""

    async def stream(self, messages, tools=None):
        for c in self.turns.pop(0):
            if isinstance(c, BaseException):  # the stream breaks here
                raise c
            yield c
        if self.stall and not self.turns:
            self.stalled.set()
            await asyncio.Event().wait()


def tool_turn(*calls: tuple[str, str]) -> list[dict]:
    deltas = [tool_delta(i, cid, name, "{}") for i, (cid, name) in enumerate(calls)]
    return [chunk({"tool_calls": deltas}), chunk({}, "tool_calls")]


@tool
async def quick() -> str:
    """Answer at once."""
    return "done"


@tool
async def stuck() -> str:
    """Wait until cancelled."""
    await asyncio.Event().wait()
    return "never"


async def run_until(history, client, registry, stop_when, msg: str | None = None) -> list:
    """Consume `react`, cancelling the consumer (with `msg`) once `stop_when(events)` holds; return every event
    seen."""
    events: list = []

    async def consume() -> None:
        async for event in react(history, client, registry):
            events.append(event)
            if stop_when(events):
                asyncio.current_task().cancel(msg)

    with pytest.raises(asyncio.CancelledError):
        await asyncio.create_task(consume())
    return events


async def test_cancelled_during_tools_keeps_finished_results_and_cancels_the_rest_in_call_order():
    registry = ToolRegistry()
    registry.register(quick)
    registry.register(stuck)
    history = [user_message("go")]
    client = TurnStream(tool_turn(("a", "quick"), ("", "stuck"), ("c", "quick")))
    events = await run_until(history, client, registry,
                             lambda seen: sum(isinstance(e, ToolResultReady) for e in seen) == 2)
    cancelled = "Error: the tool call was cancelled by the user; no result."
    # every finished call keeps its real result, wherever it stands; only the unfinished one is cancelled
    assert [(m["tool_call_id"], m["content"]) for m in history[2:]] == [("a", "done"), ("", cancelled), ("c", "done")]
    closing = events[events.index(next(e for e in events if isinstance(e, ToolResultReady) and not e.result.ok)):]
    # "a" was answered before the cancel; the closing answers "" (cancelled) and then "c" (finished earlier)
    assert [type(e).__name__ for e in closing] == ["ToolResultReady", "MessageAppended", "MessageAppended",
                                                   "RunFinished"]
    assert closing[-1].status == "cancelled" and closing[-1].turns == 1 and closing[-1].final_text == ""
    assert closing[0].result.outcome == "cancelled"  # the outcome is a field, never matched in the text


async def test_a_cancelled_call_s_duration_is_how_long_it_ran_until_the_cancel():
    # a cancelled call's duration is how long it ran (an MCP call's progress line: ~2 s, not `0.00s`)
    import time

    registry = ToolRegistry()
    registry.register(quick)
    registry.register(stuck)
    seen_at: dict[str, float] = {}

    def stop_when(seen: list) -> bool:
        if isinstance(seen[-1], ToolRunStarted) and seen[-1].call.name == "stuck":
            seen_at["started"] = time.monotonic()
        if sum(isinstance(e, ToolResultReady) for e in seen) == 1:
            seen_at["cancelled"] = time.monotonic()
            return True
        return False

    events = await run_until([user_message("go")], TurnStream(tool_turn(("s", "stuck"), ("q", "quick"))), registry,
                             stop_when)
    (cancelled,) = [e.result for e in events if isinstance(e, ToolResultReady) and e.result.outcome == "cancelled"]
    assert cancelled.duration_s >= seen_at["cancelled"] - seen_at["started"] > 0


async def test_cancelled_mid_stream_keeps_the_partial_answer_and_drops_the_unfinished_call():
    history = [user_message("go")]
    client = TurnStream([chunk({"content": "Half an ans"}),
                             chunk({"tool_calls": [tool_delta(0, "x", "quick", '{"a')]})], stall=True)
    events = await run_until(history, client, None,
                             lambda seen: any(type(e).__name__ == "ToolCallStarted" for e in seen))
    assert history[1:] == [{"role": "assistant", "content": "Half an ans\n\n[interrupted by the user]"}]
    assert isinstance(events[-2], MessageAppended) and events[-1] == RunFinished("cancelled", "Half an ans", 1,
                                                                                 "interrupted", 130)


async def test_cancelled_before_any_text_appends_nothing():
    history = [user_message("go")]
    client = TurnStream([chunk({"content": " "})], stall=True)
    events: list = []

    async def consume() -> None:
        async for event in react(history, client, None):
            events.append(event)

    task = asyncio.create_task(consume())
    # cancelled once the stream has sent its blank text and stalls (the accumulator may hold a lone " "
    # back, so no event is awaited: that hung until the global timeout)
    await client.stalled.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert history == [user_message("go")] and events[-1].status == "cancelled"


# Each assistant message records who wrote it, so a session moved to another model never sends model A's
# signed output to B as if it were B's own
async def test_each_assistant_message_records_its_author_and_the_wire_never_sees_it():
    registry = ToolRegistry()
    registry.register(nap)
    history, _, bodies = await drive(registry, [calls_sse(("a", "nap", {"seconds": 0})), text_sse("fin")])
    authors = [m.get("crow_author") for m in history if m["role"] == "assistant"]
    assert authors == [{"base_url": "http://llm.test/v1", "model": "m"}] * 2
    assert all("crow_author" not in m for body in bodies for m in body["messages"])


# Groq answers a tool call its parser could not read with code tool_use_failed and the text in
# failed_generation, as a 400 or as an error event inside a 200 stream; the same request usually succeeds
_FAILED = {"error": {"message": "Failed to call a function. Please adjust your prompt. See 'failed_generation' for "
                     "more details.", "type": "invalid_request_error", "code": "tool_use_failed",
                     "failed_generation": "<function=nap>{\"seconds\": 0</function>"}}


async def test_a_failed_generation_is_asked_for_again_the_same_request():
    history = [user_message("go")]
    c = ChatClient(ClientSettings(base_url="http://llm.test/v1", model="m", api_key="k", max_retries=0))
    in_stream = "data: " + json.dumps(_FAILED) + "\n\n"
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[httpx.Response(400, json=_FAILED), stream(in_stream),
                                                 stream(text_sse("fin"))])
        events = [e async for e in react(history, c, None, LoopSettings())]
    await c.aclose()
    bodies = [json.loads(call.request.content) for call in route.calls]
    assert bodies[0] == bodies[1] == bodies[2]
    assert [e.code for e in events if isinstance(e, Notice)].count("turn_restarted") == 2
    assert events[-1].status == "completed" and history[-1]["content"] == "fin"


async def test_a_generation_that_fails_three_times_ends_the_run_with_one_line():
    history = [user_message("go")]
    c = ChatClient(ClientSettings(base_url="http://llm.test/v1", model="m", api_key="k", max_retries=0))
    with respx.mock(assert_all_called=True) as mock:
        route = mock.post(URL).mock(side_effect=[httpx.Response(400, json=_FAILED)] * 3)
        events = [e async for e in react(history, c, None, LoopSettings())]
    await c.aclose()
    assert len(route.calls) == 3
    assert events[-1].status == "error" and "failed 3 times" in events[-1].error and "\n" not in events[-1].error


def saw_text(text: str):
    return lambda seen: any(isinstance(e, TextDelta) and text in e.text for e in seen)


# provenance: a mutation check (w5) — the canceller's message ignored, a partial answer kept beside a tool
# turn's calls, and the text of a restarted attempt kept each passed every test of this file
async def test_a_partial_answer_is_the_last_attempts_text_with_the_cancellers_note():
    history = [user_message("go")]
    client = TurnStream([chunk({"content": "Old start"}), StreamCut("the stream went idle")],
                            [chunk({"content": "New start"})], stall=True)
    await run_until(history, client, None, saw_text("New"), msg="stopped by the editor")
    assert history[1:] == [{"role": "assistant", "content": "New start\n\n[stopped by the editor]"}]


async def test_a_tool_turns_text_is_not_kept_again_as_a_partial_answer():
    registry = ToolRegistry()
    registry.register(stuck)
    history = [user_message("go")]
    client = TurnStream([chunk({"content": "Looking"}), *tool_turn(("s", "stuck"))])
    await run_until(history, client, registry, lambda seen: any(isinstance(e, ToolRunStarted) for e in seen))
    assert [(m["role"], m["content"]) for m in history[1:]] == [
        ("assistant", "Looking"), ("tool", "Error: the tool call was cancelled by the user; no result.")]


# provenance: a mutation check (w5) — a consumer that stopped listening left a tool call without a result
async def test_a_consumer_that_stops_listening_leaves_every_call_answered():
    registry = ToolRegistry()
    registry.register(stuck)
    history = [user_message("go")]
    async with aclosing(react(history, TurnStream(tool_turn(("s", "stuck"))), registry)) as events:
        async for event in events:
            if isinstance(event, ToolRunStarted):
                break
    assert history[-1] == {"role": "tool", "tool_call_id": "s",
                           "content": "Error: the tool call was cancelled by the user; no result.",
                           "crow_outcome": "cancelled"}


# provenance: a mutation check (w5) — an error counted the failed turn as finished
async def test_an_error_ends_the_run_counting_the_turns_that_finished():
    registry = ToolRegistry()
    registry.register(nap)
    history = [user_message("go")]
    c = ChatClient(ClientSettings(base_url="http://llm.test/v1", model="m", api_key="k", max_retries=0))
    with respx.mock(assert_all_called=True) as mock:
        mock.post(URL).mock(side_effect=[stream(calls_sse(("a", "nap", {"seconds": 0}))),
                                         httpx.Response(400, json={"error": {"message": "no such model"}})])
        events = [e async for e in react(history, c, registry, LoopSettings())]
    await c.aclose()
    assert (events[-1].status, events[-1].turns) == ("error", 1) and "no such model" in events[-1].error


# provenance: a mutation check (w5) — the loop not cleaning tool names passed every test of this file
async def test_a_tool_name_with_a_namespace_prefix_runs_the_tool_it_names():
    registry = ToolRegistry()
    registry.register(quick)
    history = [user_message("go")]
    client = TurnStream(tool_turn(("q", "functions.quick")), [chunk({"content": "fin"}), chunk({}, "stop")])
    events = [e async for e in react(history, client, registry)]
    assert history[1]["tool_calls"][0]["function"]["name"] == "quick" and history[2]["content"] == "done"
    assert events[-1].status == "completed"

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 24
"""The first bytes of a PNG file: enough for crow to tell its kind (it never decodes the picture)."""


@tool
def screenshot(label: str) -> Image:
    """Take a screenshot.

    Args:
        label: what to call it.
    """
    return Image(PNG, "image/png", f"{label}.png")


@tool
def echo(text: str) -> str:
    """Echo text.

    Args:
        text: what to echo.
    """
    return text


@tool
def report(text: str) -> list[str | Image]:
    """Text and an image.

    Args:
        text: the caption.
    """
    return [text, Image(PNG)]


def registry() -> ToolRegistry:
    r = ToolRegistry()
    for t in (screenshot, echo, report):
        r.register(t)
    return r


async def test_a_tool_image_goes_in_a_user_message_after_every_tool_message() -> None:
    history, _, bodies = await drive(registry(), [
        calls_sse(("call_1", "screenshot", {"label": "home"}), ("call_2", "echo", {"text": "hi"}),
                  ("call_3", "report", {"text": "caption"})),
        text_sse("I see it")])
    roles = [m["role"] for m in bodies[1]["messages"]]
    assert roles == ["user", "assistant", "tool", "tool", "tool", "user"]  # all N tool messages first
    tools = [m for m in bodies[1]["messages"] if m["role"] == "tool"]
    assert [t["tool_call_id"] for t in tools] == ["call_1", "call_2", "call_3"]
    assert tools[0]["content"] == "[image: home.png, image/png, 32 B]"  # text only, naming the image
    assert tools[1]["content"] == "hi"
    assert tools[2]["content"] == "caption\n[image: image/png, 32 B]"
    shown = bodies[1]["messages"][-1]["content"]
    assert shown[0]["type"] == "text"
    assert "screenshot (call_1)" in shown[0]["text"] and "report (call_3)" in shown[0]["text"]
    urls = [p["image_url"]["url"] for p in shown[1:]]
    assert urls == [Image(PNG, "image/png").data_url()] * 2
    assert authorless(history)[-1] == {"role": "assistant", "content": "I see it"}  # the loop's history holds it
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "tool", "tool", "user", "assistant"]


async def test_a_tool_image_is_named_in_the_history_and_not_on_the_wire() -> None:
    # resume, export and an editor's replay show `[image: NAME, SIZE]`: the image's own name, else its tool's
    from crow_cli.images import describe_part

    history, _, bodies = await drive(registry(), [
        calls_sse(("call_1", "screenshot", {"label": "home"}), ("call_2", "report", {"text": "caption"})),
        text_sse("I see it")])
    kept = history[4]["content"][1:]
    assert [describe_part(p) for p in kept] == ["[image: home.png, 32 B]", "[image: from report, 32 B]"]
    assert bodies[1]["messages"][-1]["content"][1:] == [
        {"type": "image_url", "image_url": {"url": Image(PNG, "image/png").data_url()}}] * 2


async def test_a_model_known_to_take_no_images_gets_the_placeholders_only() -> None:
    _, _, bodies = await drive(registry(), [calls_sse(("c1", "screenshot", {"label": "x"})), text_sse("ok")],
                               images=False)
    assert [m["role"] for m in bodies[1]["messages"]] == ["user", "assistant", "tool"]
    assert bodies[1]["messages"][-1]["content"] == "[image: x.png, image/png, 32 B]"


async def test_a_turn_without_images_adds_no_message() -> None:
    _, _, bodies = await drive(registry(), [calls_sse(("c1", "echo", {"text": "a"})), text_sse("ok")])
    assert [m["role"] for m in bodies[1]["messages"]] == ["user", "assistant", "tool"]


def test_a_tool_result_keeps_its_images_off_the_tool_message() -> None:
    result = ToolResult("c1", "shot", "[image: image/png, 32 B]", images=(Image(PNG),))
    assert result.to_message() == {"role": "tool", "tool_call_id": "c1", "content": "[image: image/png, 32 B]",
                                   "crow_outcome": "ok"}


async def test_the_tool_api_returns_text_for_an_image() -> None:
    assert await screenshot.invoke({"label": "a"}) == "[image: a.png, image/png, 32 B]"
    out = await report.run({"text": "t"})
    assert out.text == "t\n[image: image/png, 32 B]" and out.images == (Image(PNG, "image/png"),)
    assert (await tool(lambda: ["a", "b"], name="rows").run({})).text == '["a", "b"]'  # a list without images: JSON


def test_the_images_message_is_no_prompt() -> None:
    # undo, chat's resume and compaction's cut look for the last prompt: the images message belongs to its turn
    from crow_cli.history import is_prompt, user_message
    from crow_cli.images import tool_images_message

    shown = tool_images_message([("screenshot", "c1", [Image(PNG)])])
    assert shown is not None and not is_prompt(shown)
    assert is_prompt(user_message("hi")) and is_prompt({"role": "user", "content": [{"type": "text", "text": "x"}]})
    assert not is_prompt({"role": "assistant", "content": "hi"})


def test_a_jsonl_tool_result_names_its_images_without_their_bytes() -> None:
    from crow_cli.events import ToolResultReady
    from crow_cli.surfaces.jsonl import event_to_json
    from tests.support import schema_validator

    result = ToolResult("c1", "shot", "[image]", images=(Image(PNG, name="a"),))
    line = json.loads(event_to_json(ToolResultReady(result)))
    assert line["result"]["images"] == [{"mime_type": "image/png", "bytes": 32, "name": "a"}]
    schema_validator().validate(line)


async def test_images_past_the_caps_are_named_not_sent() -> None:
    @tool
    def many() -> list[Image]:
        """Too many images, one of no known kind."""
        return [Image(PNG)] * 9 + [Image(b"not an image", "image/tiff")]

    r = ToolRegistry()
    r.register(many)
    _, _, bodies = await drive(r, [calls_sse(("c1", "many", {})), text_sse("ok")])
    tool_text = bodies[1]["messages"][2]["content"]
    assert tool_text.endswith("[2 images not shown to the model (more than 8, larger than 10 MiB, or not PNG, JPEG, "
                              "GIF or WebP): [image: image/png, 32 B], [image: image/tiff, 12 B]]")
    assert len(bodies[1]["messages"][3]["content"]) == 1 + 8


async def test_a_cancelled_turn_still_shows_the_images_of_its_finished_calls() -> None:
    import asyncio
    import contextlib

    from crow_cli.events import ToolResultReady

    never = asyncio.Event()

    @tool
    async def hang() -> str:
        """Wait for ever."""
        await never.wait()
        return "never"

    r = registry()
    r.register(hang)
    history = [user_message("go")]
    c = ChatClient(ClientSettings(base_url="http://llm.test/v1", model="m", api_key="k", max_retries=0))
    shot = asyncio.Event()

    async def consume() -> None:
        async for e in react(history, c, r, LoopSettings()):
            if isinstance(e, ToolResultReady) and e.result.name == "screenshot":
                shot.set()

    with respx.mock() as mock:
        mock.post(URL).mock(return_value=httpx.Response(
            200, content=calls_sse(("c1", "screenshot", {"label": "a"}), ("c2", "hang", {})).encode(),
            headers={"content-type": "text/event-stream"}))
        task = asyncio.create_task(consume())
        await shot.wait()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    await c.aclose()
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "tool", "user"]
    assert history[3]["content"].startswith("Error: the tool call was cancelled")
    assert history[4]["content"][1]["image_url"]["url"] == Image(PNG, "image/png").data_url()


async def test_read_file_shows_an_image_file(tmp_path, monkeypatch) -> None:
    # A screenshot in the workspace is shown as an image, not "a binary file; not read"
    from crow_cli.tools.builtin.files import read_file

    monkeypatch.chdir(tmp_path)
    (tmp_path / "shot.png").write_bytes(PNG)
    out = await read_file.run({"path": "shot.png"})
    assert out.text == "[image: shot.png, image/png, 32 B]" and out.images == (Image(PNG, "image/png", "shot.png"),)

class RecordingStream(ScriptedStream):
    def __init__(self, steps: list[tuple[Any, ...]]) -> None:
        super().__init__(steps)
        self.sent: list[list[dict[str, Any]]] = []

    def stream(self, messages, tools=None):  # type: ignore[no-untyped-def]
        self.sent.append([dict(m) for m in messages])
        return super().stream(messages, tools)


async def _run(steps: list[tuple[Any, ...]], attempts: int = 2) -> tuple[list, list, RecordingStream]:
    registry = ToolRegistry()
    registry.register(ok)
    history = [user_message("go")]
    stream = RecordingStream(steps)
    events = [e async for e in react(history, stream, registry, LoopSettings(stream_attempts=attempts))]
    return history, events, stream


async def test_a_cut_tool_turn_is_asked_again_and_its_calls_run_once() -> None:
    history, events, stream = await _run([("cut", [("call_x", "ok")]), ("tools", [("call_y", "ok")]), ("text",)])
    stream.assert_used_up()
    kinds = [type(e) for e in events]
    notice = kinds.index(Notice)
    assert events[notice].code == "turn_restarted"
    assert [e.call_id for e in events[:notice] if isinstance(e, ToolCallStarted)] == ["call_x"]
    assert [e.call.id for e in events if isinstance(e, ToolRunStarted)] == ["call_y"]  # the cut call never ran
    assert stream.sent[0] == stream.sent[1]
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant"]
    assert history[1]["tool_calls"][0]["id"] == "call_y" and history[2]["tool_call_id"] == "call_y"
    assert events[-1] == RunFinished("completed", "done", 2)


async def test_a_second_cut_fails_the_run_and_leaves_the_history_untouched() -> None:
    history, events, stream = await _run([("cut", [("a", "ok")]), ("cut", [("b", "ok")])])
    stream.assert_used_up()
    assert events[-1].status == "error" and "after 2 attempts" in events[-1].error
    assert history == [user_message("go")]


async def test_stream_attempts_one_means_no_retry() -> None:
    _, events, stream = await _run([("cut", [("a", "ok")]), ("text",)], attempts=1)
    assert events[-1].status == "error" and len(stream.sent) == 1 and stream.steps == [("text",)]
    assert not any(isinstance(e, Notice) for e in events)

call_ids = st.sampled_from(["call_a", "call_b", "", "call_a"])
tool_names = st.sampled_from(["ok", "boom", "slow", "missing"])
calls = st.lists(st.tuples(call_ids, tool_names), min_size=1, max_size=3)
steps = st.one_of(st.just(("text",)), st.just(("error",)), st.tuples(st.just("tools"), calls),
                  st.tuples(st.just("cut"), calls))
# Each script ends with a text answer, so the loop never asks beyond it (ScriptedStream fails if it does).
scripts = st.lists(steps, max_size=4).map(lambda script: [*script, ("text",)])
runs = st.lists(st.tuples(scripts, st.none() | st.integers(1, 25)), min_size=1, max_size=4)


def _repeated_ids(plan: list[tuple[list[tuple[Any, ...]], int | None]]) -> frozenset[str]:
    """Ids a scripted turn gives to several of its calls: the contract allows repeats the stream made."""
    return frozenset(cid for script, _ in plan for step in script if step[0] in ("tools", "cut")
                     for cid, _name in step[1] if [c for c, _n in step[1]].count(cid) > 1)


async def _play(plan: list[tuple[list[tuple[Any, ...]], int | None]]) -> list[Message]:
    registry = ToolRegistry()
    for t in (ok, boom, slow):
        registry.register(t)
    history: list[Message] = []
    loop_settings = LoopSettings(max_turns=3)  # `slow` times out by its own limit; the others never
    dup_ids = _repeated_ids(plan)
    for n, (script, cancel_after) in enumerate(plan):
        history.append(user_message(f"request {n}"))

        async def consume(script: list[tuple[Any, ...]] = script, cancel_after: int | None = cancel_after) -> None:
            seen = 0
            async for _event in react(history, ScriptedStream(script, dup_ids), registry, loop_settings):
                seen += 1
                if seen == cancel_after:  # a signal lands here; it is delivered at the loop's next await
                    task = asyncio.current_task()
                    assert task is not None
                    task.cancel()

        task = asyncio.create_task(consume())
        with contextlib.suppress(asyncio.CancelledError):  # cancelled mid-run, or just after its last event
            await task
        # the loop closed its own history: valid as it stands, checked before any repair (a repair first would
        # hide a close that left a call unanswered)
        assert_contract(history, dup_ids)
        assert pending_tool_calls(history) == []
        assert repair_history(history, "cancelled") == []
    return history


@settings(max_examples=150, deadline=None)
@given(runs)
def test_history_contract_holds_after_faults_and_cancellations(plan: list[tuple[list[tuple[Any, ...]], int | None]]
                                                               ) -> None:
    history = asyncio.run(_play(plan))
    assert_contract(history, _repeated_ids(plan))
    assert [m["content"] for m in history if m["role"] == "user"] == [f"request {n}" for n in range(len(plan))]


# hooks are told the approval mode in force at each turn, after a switch too, not the one the run started with
async def test_hooks_are_told_the_approval_mode_in_force_after_a_switch(tmp_path):
    """A mode switched after the run's hooks were made (Shift+Tab, an editor's switch, an approved plan) is the
    `permission_mode` the next tool call's hooks are sent."""
    from dataclasses import replace

    from crow_cli.tools.context import ToolContext
    from crow_cli.tools.hooks import Hooks, parse_hooks

    seen = tmp_path / "seen.json"
    hooks = Hooks(parse_hooks({"PreToolUse": [{"command": f"cat > '{seen}'"}]}, "crow.toml"), cwd=tmp_path,
                  permission_mode="default")
    approve = make_approver("ask")
    approve.policy = replace(approve.policy, mode="yolo")  # as ACP's set_mode and chat's Shift+Tab switch it
    registry = ToolRegistry()
    registry.register(nap)
    c = ChatClient(ClientSettings(base_url="http://llm.test/v1", model="m", api_key="k", max_retries=0))
    with respx.mock() as mock:
        mock.post(URL).mock(side_effect=[stream(calls_sse(("n1", "nap", {"seconds": 0}))), stream(text_sse("ok"))])
        async for _ in react([user_message("go")], c, registry, approve=approve,
                             context=replace(ToolContext.for_workspace(tmp_path), hooks=hooks)):
            pass
    await c.aclose()
    assert json.loads(seen.read_text())["permission_mode"] == "bypassPermissions"
