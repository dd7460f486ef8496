"""Argument fragments at an index that never opened a call (issue 10 item 1).

One server gave a call's header (id, name) the index of the tool in the request's `tools` list and
its argument deltas the index of the call in the response. Rule: fragments at an index that never
got an id or a name belong to the one call whose own arguments are still empty or incomplete;
with none or several such calls they are dropped with a warning; a call without a name is never
sent back or run.
"""

from __future__ import annotations

import json

from crow_cli.events import ToolCallStarted, WarningEvent
from crow_cli.wire.accumulate import StreamAccumulator
from tests.conftest import chunk, tool_delta


def assemble(*chunks, trace: bool = False):
    acc = StreamAccumulator(trace=trace)
    events = []
    for c in chunks:
        events += acc.feed(c)
    turn, tail = acc.finish()
    return turn, events + tail


def calls(turn):
    return [(c.id, c.name, json.loads(c.arguments), c.index) for c in turn.tool_calls]


def warnings(events):
    return [e.message for e in events if isinstance(e, WarningEvent)]


def test_header_at_tool_index_and_arguments_at_call_index_make_one_call():
    turn, events = assemble(
        chunk({"tool_calls": [tool_delta(1, "call_h1", "lookup_order", "")]}),
        chunk({"tool_calls": [tool_delta(0, arguments='{"order_id": ')]}),
        chunk({"tool_calls": [tool_delta(0, arguments='"A-17"}')]}),
        chunk({}, "tool_calls"),
    )
    assert calls(turn) == [("call_h1", "lookup_order", {"order_id": "A-17"}, 0)]
    assert warnings(events) == []  # a repair that lost nothing is traced, not warned
    assert [e.index for e in events if isinstance(e, ToolCallStarted)] == [0]


def test_attribution_is_traced_with_debug():
    _, events = assemble(
        chunk({"tool_calls": [tool_delta(3, "c3", "f", "")]}),
        chunk({"tool_calls": [tool_delta(7, arguments="{}")]}),
        trace=True,
    )
    assert [w for w in warnings(events) if "index 7" in w and "never opened a call" in w]


def test_far_apart_indices_and_arguments_before_the_header():
    turn, events = assemble(
        chunk({"tool_calls": [tool_delta(7, arguments='{"q"')]}),
        chunk({"tool_calls": [tool_delta(3, "c3", "search", "")]}),
        chunk({"tool_calls": [tool_delta(7, arguments=': "x"}')]}),
        chunk({}, "tool_calls"),
    )
    assert calls(turn) == [("c3", "search", {"q": "x"}, 0)]
    assert [(e.index, e.call_id) for e in events if isinstance(e, ToolCallStarted)] == [(0, "c3")]


def test_fragments_merge_with_the_open_calls_own_in_arrival_order():
    turn, _ = assemble(
        chunk({"tool_calls": [tool_delta(1, "c1", "f", '{"a"')]}),
        chunk({"tool_calls": [tool_delta(0, arguments=": 1")]}),
        chunk({"tool_calls": [tool_delta(1, arguments=', "b"')]}),
        chunk({"tool_calls": [tool_delta(0, arguments=": 2}")]}),
    )
    assert calls(turn) == [("c1", "f", {"a": 1, "b": 2}, 0)]


def test_two_open_calls_cannot_take_the_fragments_which_are_dropped_with_a_warning():
    turn, events = assemble(
        chunk({"tool_calls": [tool_delta(1, "c1", "f", ""), tool_delta(2, "c2", "g", "")]}),
        chunk({"tool_calls": [tool_delta(0, arguments='{"x": 1}')]}),
        chunk({}, "tool_calls"),
    )
    assert calls(turn) == [("c1", "f", {}, 0), ("c2", "g", {}, 1)]
    assert any("index 0" in w and "2 calls were open" in w for w in warnings(events))


def test_no_open_call_leaves_the_fragments_unattributed():
    turn, events = assemble(
        chunk({"tool_calls": [tool_delta(1, "c1", "f", '{"a": 1}')]}),
        chunk({"tool_calls": [tool_delta(0, arguments='{"b": 2}')]}),
    )
    assert calls(turn) == [("c1", "f", {"a": 1}, 0)]
    assert any("0 calls were open" in w for w in warnings(events))


def test_a_name_arriving_later_at_that_index_opens_the_call_there():
    # vllm-command-a-name-after-args, without the id: the index is not an orphan once it has a name
    turn, events = assemble(
        chunk({"tool_calls": [tool_delta(1, "c1", "f", "")]}),
        chunk({"tool_calls": [tool_delta(0, arguments='{"city": ')]}),
        chunk({"tool_calls": [tool_delta(0, name="get_weather")]}),
        chunk({"tool_calls": [tool_delta(0, arguments='"Oslo"}')]}),
        chunk({"tool_calls": [tool_delta(1, arguments="{}")]}),
        chunk({}, "tool_calls"),
    )
    assert calls(turn) == [("c1", "f", {}, 0), ("", "get_weather", {"city": "Oslo"}, 1)]
    assert warnings(events) == []


def test_a_call_that_never_gets_a_name_is_dropped_with_a_warning():
    turn, events = assemble(
        chunk({"tool_calls": [tool_delta(0, "c0", "f", "{}")]}),
        chunk({"tool_calls": [tool_delta(1, "c1", arguments='{"a": 1}')]}),
        chunk({}, "tool_calls"),
    )
    assert calls(turn) == [("c0", "f", {}, 0)]
    assert [w for w in warnings(events) if "[c1]" in w and "no function name" in w]


def test_only_nameless_fragments_leave_a_turn_without_calls():
    turn, events = assemble(chunk({"tool_calls": [tool_delta(0, arguments='{"a": 1}')]}), chunk({}, "tool_calls"))
    assert turn.tool_calls == [] and not turn.is_tool_turn
    assert any("never opened a call" in w for w in warnings(events))


def test_many_interleaved_runs_merge_in_arrival_order():
    payload = json.dumps({"blob": "".join(chr(97 + n % 26) for n in range(20_000))})
    pieces = [chunk({"tool_calls": [tool_delta(0 if n % 3 else 5, arguments=ch)]}) for n, ch in enumerate(payload)]
    turn, events = assemble(chunk({"tool_calls": [tool_delta(5, "c5", "f")]}), *pieces)
    assert turn.tool_calls[0].arguments == payload and warnings(events) == []
