"""Tool names with chat-template tokens leaked into them, as served models send them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from crow_cli.events import MessageAppended, ToolResultReady, TurnFinished, WarningEvent
from crow_cli.history import AssistantTurn, ToolCall, user_message
from crow_cli.loop import LoopSettings, react
from crow_cli.tools.names import ToolNameCleaner
from crow_cli.tools.registry import ToolRegistry
from crow_cli.tools.tool import tool
from crow_cli.wire.names import clean_tool_name
from crow_cli.wire.protocol import ChatStream
from tests.support import chunk, tool_delta

KNOWN = {"read_file", "lookup_order", "run_shell"}


@pytest.mark.parametrize(("leaked", "clean"), [
    ("lookup_order<|channel|>commentary", "lookup_order"),
    ("read_file<|constrain|>json", "read_file"),
    ("read_file ", "read_file"),
    ("\tread_file\n", "read_file"),
    ("read_file <|call|>", "read_file"),
    ("functions.read_file", "read_file"),
    ("functions.lookup_order<|channel|>commentary", "lookup_order"),
])
def test_a_leaked_name_that_cleans_to_a_registered_tool_is_that_tool(leaked, clean):
    assert clean_tool_name(leaked, KNOWN) == (clean, True)


@pytest.mark.parametrize("name", [
    "read_file",  # registered: never touched
    "read_files<|channel|>commentary",  # cleans to no registered tool
    "<|channel|>read_file",  # nothing before the token
    "lookup",  # a prefix of a tool is not that tool
    "functions_read_file",
    "",
])
def test_other_names_are_left_as_they_are(name):
    assert clean_tool_name(name, KNOWN) == (name, False)


def test_a_registered_name_containing_the_token_is_kept():
    assert clean_tool_name("odd<|name", {"odd", "odd<|name"}) == ("odd<|name", False)


def _turn(*names: str) -> AssistantTurn:
    return AssistantTurn(tool_calls=[ToolCall(f"c{n}", name, "{}", n) for n, name in enumerate(names)])


def test_cleaner_replaces_names_and_warns_once_per_run():
    cleaner = ToolNameCleaner(KNOWN)
    first, second = _turn("read_file ", "lookup_order", "nope<|x|>"), _turn("lookup_order<|channel|>commentary")
    warnings = cleaner.clean(first) + cleaner.clean(second)
    assert [c.name for c in first.tool_calls] == ["read_file", "lookup_order", "nope<|x|>"]
    assert [c.name for c in second.tool_calls] == ["lookup_order"]
    assert [(c.id, c.index) for c in first.tool_calls] == [("c0", 0), ("c1", 1), ("c2", 2)]
    assert len(warnings) == 1 and "'read_file '" in warnings[0].message and warnings[0].call_id == "c0"


def test_cleaner_with_trace_reports_every_cleaned_name():
    cleaner = ToolNameCleaner(KNOWN, trace=True)
    assert len(cleaner.clean(_turn("read_file ", "functions.run_shell"))) == 2


@tool
async def lookup_order(order_id: str) -> str:
    """Look an order up."""
    return f"order {order_id}: shipped"


class _Scripted(ChatStream):
    """A `loop.ChatStream` playing chunk lists, one per request; records the messages of each."""

    def __init__(self, *turns: list[dict[str, Any]]) -> None:
        self.turns, self.sent = list(turns), []

    async def stream(self, messages, tools=None) -> AsyncIterator[dict[str, Any]]:
        self.sent.append([dict(m) for m in messages])
        for c in self.turns.pop(0):
            yield c


async def run_one_call(name: str, arguments: str) -> tuple[list[Any], list[list[dict[str, Any]]]]:
    """One run where the model calls `name` once, then answers; the events and the messages of each request."""
    registry = ToolRegistry()
    registry.register(lookup_order)
    client = _Scripted([chunk({"tool_calls": [tool_delta(0, "call_1", name, arguments)]}), chunk({}, "tool_calls")],
                       [chunk({"content": "done"}), chunk({}, "stop")])
    events = [e async for e in react([user_message("where is my order?")], client, registry, LoopSettings())]
    return events, client.sent


async def test_the_loop_runs_the_clean_tool_and_sends_the_clean_name_back():
    events, sent = await run_one_call("lookup_order<|channel|>commentary", '{"order_id": "A-17"}')
    assert [e.message for e in events if isinstance(e, WarningEvent)] == [
        "tool call [call_1]: the name 'lookup_order<|channel|>commentary' is not a tool; ran 'lookup_order' (the "
        "server leaked template tokens or spaces into the name); other such names in this run are cleaned "
        "without a warning"]
    result = next(e.result for e in events if isinstance(e, ToolResultReady))
    assert result.ok and result.output == "order A-17: shipped" and result.call_id == "call_1"
    turn = next(e for e in events if isinstance(e, TurnFinished))
    assert [c.name for c in turn.tool_calls] == ["lookup_order"]
    sent_back = sent[1][1]
    assert sent_back["tool_calls"][0]["function"]["name"] == "lookup_order"
    assert sent_back["tool_calls"][0]["id"] == "call_1"
    assert next(e.message for e in events if isinstance(e, MessageAppended)) == sent_back  # stored as sent


async def test_a_name_that_cleans_to_no_tool_gets_the_unknown_tool_result():
    events, sent = await run_one_call("lookup<|channel|>commentary", "{}")
    result = next(e.result for e in events if isinstance(e, ToolResultReady))
    assert not result.ok and "unknown tool" in result.output
    assert sent[1][1]["tool_calls"][0]["function"]["name"] == "lookup<|channel|>commentary"
    assert not [e for e in events if isinstance(e, WarningEvent)]


# ---- wire names: a tool goes on the wire under a name matching '^[a-zA-Z0-9_-]+$', since OpenAI, DeepSeek and
# Anthropic-compatible endpoints answer 400 "Invalid 'tools[0].function.name': string does not match pattern" for
# plugin and MCP names such as `get_/whoami` or `Sequential Thinking`

@pytest.mark.parametrize(("name", "wire"), [
    ("read_file", "read_file"), ("get_/whoami", "get__whoami"), ("Sequential Thinking", "Sequential_Thinking"),
    ("github.create-issue", "github_create-issue"), ("x" * 70, "x" * 64), ("", "tool"), ("café", "caf_"),
])
def test_wire_name_keeps_what_servers_take_and_replaces_the_rest(name, wire):
    from crow_cli.wire.names import WIRE_NAME, wire_name

    assert wire_name(name) == wire and WIRE_NAME.fullmatch(wire)


async def test_a_tool_offered_under_its_wire_name_runs_and_the_history_keeps_the_wire_name():
    registry = ToolRegistry()
    registry.register(tool(lookup_order.fn, name="orders.lookup"))
    assert [s["function"]["name"] for s in registry.schemas()] == ["orders_lookup"]
    for called in ("orders_lookup", "orders.lookup"):  # the offered name, or the registered one
        client = _Scripted([chunk({"tool_calls": [tool_delta(0, "call_1", called, '{"order_id": "B-2"}')]}),
                            chunk({}, "tool_calls")], [chunk({"content": "done"}), chunk({}, "stop")])
        events = [e async for e in react([user_message("where?")], client, registry, LoopSettings())]
        result = next(e.result for e in events if isinstance(e, ToolResultReady))
        assert result.ok and result.output == "order B-2: shipped"
        assert client.sent[1][1]["tool_calls"][0]["function"]["name"] == "orders_lookup"
        assert not [e for e in events if isinstance(e, WarningEvent)]


def test_an_unknown_name_gets_the_closest_offered_names() -> None:
    from crow_cli.tools.names import similar_names

    offered = ["read_file", "write_file", "list_directory", "run_shell"]
    assert similar_names("read", offered)[0] == "read_file"
    assert similar_names("list_dir", offered) == ["list_directory"]
    assert similar_names("zz", offered) == []


def test_a_name_differing_only_in_case_is_the_offered_tool() -> None:
    from crow_cli.wire.names import clean_tool_name

    assert clean_tool_name("Read_File", ["read_file", "write_file"]) == ("read_file", True)
    assert clean_tool_name("functions.READ_FILE", ["read_file"]) == ("read_file", True)
    assert clean_tool_name("X", ["x", "X_"]) == ("x", True)
    assert clean_tool_name("a", ["A", "a_"]) == ("A", True)
    assert clean_tool_name("ab", ["AB", "Ab"]) == ("ab", False)  # two offered names differ only in case
    # by_case=False (`repair_tool_calls = false`): another case is another name; leaked tokens are still cut
    assert clean_tool_name("Read_File", ["read_file"], by_case=False) == ("Read_File", False)
    assert clean_tool_name("functions.read_file", ["read_file"], by_case=False) == ("read_file", True)


@pytest.mark.parametrize(("written", "why"), [
    ("Read_File", "the model wrote it in another case"),
    ("functions.read_file", "the functions. prefix"),
    ("read_file<|constrain|>json", "template tokens"),
    ("read_file ", "spaces"),
])
def test_the_warning_says_how_the_name_differed(written: str, why: str) -> None:
    # the warning names the model's slip (another case, the functions. prefix) as the model's, not as template
    # tokens the server leaked, which would send a person to look at the server's parser
    [warning] = ToolNameCleaner(KNOWN).clean(_turn(written))
    assert why in warning.message and "ran 'read_file'" in warning.message, warning.message
    if why in ("the model wrote it in another case", "the functions. prefix"):  # the model's doing, not the server's
        assert "template tokens" not in warning.message
