"""The pure accumulator (`wire/accumulate`): every conformance case, then one test per rule (the rules, and
which server sends each shape: docs/streaming.md).

Properties guarded here:

- every conformance case assembles the calls, text, reasoning and finish reason expected;
- calls are keyed by index (missing: the position or the latest call); id, type, name and every key a server
  attaches to a call come from their first non-empty value, never overwritten;
- a new id and name at a used index starts a call once the open one's arguments are complete (Ollama);
- fragments are joined once; a final chunk repeating the whole arguments is not appended; orphan fragments
  go to the one open call, else are dropped with a warning; nameless calls are dropped with a warning;
- calls are indexed in call order; a turn with calls is a tool turn whatever `finish_reason` says;
- cut arguments are repaired with a warning (`cut_off` where the repair had to guess);
- reasoning blocks merge per index and type, a piece with another signature at that index is a block of its
  own; whatever else the server attaches is kept to be sent back;
- what a server attaches is kept to go back exactly: reasoning blocks, reasoning under each of its names,
  `<think>` in content, unknown keys of tool calls and of the message, odd continuation values (OpenRouter
  reasoning_details, DeepSeek / Ollama reasoning fields, MiniMax <think>, Gemini extra_content, local
  runtimes' "null" names and counting indexes);
- any re-chunking of a valid tool-call stream (arguments split anywhere, parallel indices interleaved, `""`
  id/name continuations, several deltas in one chunk, usage-only chunks anywhere) gives the same ids, names
  and arguments, in call order;
- `delta.refusal` is shown and kept; an answer with nothing in it says so;
- a token limit, a content filter or a missing finish reason is warned about.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crow_cli.errors import ServerError
from crow_cli.events import Notice, ReasoningDelta, TextDelta, ToolCallDelta, ToolCallStarted, WarningEvent
from crow_cli.tools.names import ToolNameCleaner
from crow_cli.wire.accumulate import StreamAccumulator
from crow_cli.wire.calls import PartialCall as _PartialCall  # the per-call record
from crow_cli.wire.textcalls import recover_calls
from tests.support import (
    assemble,
    calls_in_text,
    chunk,
    expected_sse,
    first_sse,
    load_cases,
    run_here,
    sse,
    sse_chunks,
    tool_delta,
)

CASES = load_cases()


# a case that fails before any stream is read (its only stream answers a request the server refuses) has
# no turn to assemble
STREAM_CASES = [c for c in CASES if c["expected"].get("finish_reason") != "error"
                and not ((c.get("scenario") or {}).get("expect_failure")
                         and c["expected"].get("finish_reason") is None)]


@pytest.mark.parametrize("case", STREAM_CASES, ids=lambda c: c["id"])
def test_conformance_case_assembles_expected_calls(case):
    turn, _ = assemble(*sse_chunks(expected_sse(case)))
    expected = case["expected"]
    if calls_in_text(case):  # the stream has text only: the loop recovers the calls from it (wire.textcalls)
        assert turn.tool_calls == []
        names = [c["function"]["name"] for c in expected["tool_calls"]]
        found = recover_calls(turn.content, names)
        assert found is not None and [n for n, _ in found.calls] == names
        assert (found.lead_in or "") == (expected.get("content") or "").strip()
        return
    # as the loop does with a registry of the expected tools: leaked template tokens are cut from names
    ToolNameCleaner(c["function"]["name"] for c in expected.get("tool_calls") or []).clean(turn)
    got = [(c.id, c.name, json.loads(c.arguments)) for c in turn.tool_calls]
    want = [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in expected.get("tool_calls") or []]
    assert got == want
    # a case whose server refuses content beside reasoning expects the content of the adapted copy that was sent
    if not any("assistant_tool_calls_with_all" in (step.get("reject_if") or {}).get("rule", {})
               for step in case.get("responses") or []):
        assert (turn.content or "").strip() == (expected.get("content") or "").strip()
    if "finish_reason" in expected:  # request-adaptation cases name none
        assert turn.finish_reason == expected["finish_reason"]
    for call in turn.tool_calls:
        call.arguments.encode("utf-8")  # no lone surrogates survive


class _GeneralPathOnly(StreamAccumulator):
    """The accumulator with its one-key hot path turned off: every chunk goes the general way."""

    def _one_key(self, choice: object, events: list[object]) -> bool:  # type: ignore[override]
        return False


def _feed_all(acc: StreamAccumulator, chunks: list[dict]) -> tuple[object, list[object], str]:
    events: list[object] = []
    try:
        for c in chunks:
            events += acc.feed(c)
        turn, tail = acc.finish()
    except ServerError as exc:
        return None, events, f"{type(exc).__name__}: {exc}"
    return turn, events + tail, ""


def _split_text(chunks: list[dict]) -> list[dict]:
    """Each one-key content or argument delta cut into one-character deltas (the hot path's own shape)."""
    out = []
    for c in chunks:
        choices = c.get("choices") if isinstance(c, dict) else None
        delta = choices[0].get("delta") if isinstance(choices, list) and len(choices) == 1 \
            and isinstance(choices[0], dict) else None
        text = delta.get("content") if isinstance(delta, dict) and len(delta) == 1 else None
        if isinstance(text, str) and len(text) > 1 and not choices[0].get("finish_reason"):
            out += [{**c, "choices": [{**choices[0], "delta": {"content": ch}}]} for ch in text]
        else:
            out.append(c)
    return out


_ARGS = '{"path": "a.py"}'
HOT_PATH_SHAPES = {
    # a template tag leaking into the answer, one piece at a time (llama.cpp with a small model)
    "leaked-tag": [chunk({"content": p}) for p in ("Done", ".</tool", "_response>", " Bye")],
    # the whole arguments sent once more after their fragments (vLLM with GLM)
    "arguments-repeated": [chunk({"tool_calls": [tool_delta(0, "call_1", "read_file", "")]}),
                           *(chunk({"tool_calls": [{"index": 0, "function": {"arguments": p}}]})
                             for p in ('{"path": ', '"a.py"}', _ARGS)),
                           chunk({}, "tool_calls")],
    # <think> in content, split across pieces (DeepSeek-R1 distills behind Ollama)
    "think-in-content": [chunk({"content": p}) for p in ("<th", "ink>hmm</think>", "Answer")],
}


def _shapes() -> list[tuple[str, list[dict]]]:
    recorded = [(c["id"], list(sse_chunks(expected_sse(c)))) for c in STREAM_CASES]
    return [*recorded, *((f"{name} (one character each)", _split_text(chunks)) for name, chunks in recorded),
            *HOT_PATH_SHAPES.items()]


# the hot path's copy of the general rules (`_one_key`) is held to them: every corpus stream, as recorded and cut
# into one-character pieces, and the shapes the hot path must hand on, give the same turn and events both ways
@pytest.mark.parametrize(("name", "chunks"), _shapes(), ids=[name for name, _ in _shapes()])
def test_the_hot_path_gives_what_the_general_path_gives(name, chunks):
    fast, general = _feed_all(StreamAccumulator(), chunks), _feed_all(_GeneralPathOnly(), chunks)
    assert repr(fast) == repr(general)


def test_inband_error_case_raises_with_server_message_and_code():
    case = next(c for c in CASES if c["id"] == "vllm-inband-error-event")
    acc = StreamAccumulator()
    with pytest.raises(ServerError) as info:
        for c in sse_chunks(first_sse(case)):
            acc.feed(c)
    assert "overloaded" in str(info.value) and info.value.code == 503 and info.value.status == 503


def test_empty_string_id_and_name_never_overwrite():
    turn, _ = assemble(
        chunk({"tool_calls": [tool_delta(0, "call_1", "run", '{"a"')]}),
        chunk({"tool_calls": [{"index": 0, "id": "", "type": "", "function": {"name": "", "arguments": ": 1}"}}]}),
        chunk({}, "tool_calls"),
    )
    assert [(c.id, c.name, c.arguments) for c in turn.tool_calls] == [("call_1", "run", '{"a": 1}')]


def test_identical_repeat_of_id_and_name_is_ignored():
    turn, _ = assemble(
        chunk({"tool_calls": [tool_delta(0, "c1", "get_weather", '{"city": "Par')]}),
        chunk({"tool_calls": [tool_delta(0, "c1", "get_weather", 'is"}')]}, "tool_calls"),
    )
    assert [(c.id, c.name, c.arguments) for c in turn.tool_calls] == [("c1", "get_weather", '{"city": "Paris"}')]


def test_name_may_arrive_in_pieces():
    turn, _ = assemble(
        chunk({"tool_calls": [tool_delta(0, "c1", "get_")]}),
        chunk({"tool_calls": [tool_delta(0, name="weather")]}),
        chunk({"tool_calls": [tool_delta(0, arguments="{}")]}),
    )
    assert turn.tool_calls[0].name == "get_weather"


def test_object_arguments_are_serialised():
    turn, _ = assemble(chunk({"tool_calls": [tool_delta(0, "c1", "f", {"x": [1, "é"]})]}))
    assert json.loads(turn.tool_calls[0].arguments) == {"x": [1, "é"]}


def test_final_chunk_repeating_complete_arguments_is_not_appended():
    # provenance: a mutation check (w5) — with the repeat appended, the repair hid it: the warning shows it
    turn, events = assemble(
        chunk({"tool_calls": [tool_delta(0, "c1", "f", '{"a": ')]}),
        chunk({"tool_calls": [tool_delta(0, arguments="1}")]}),
        chunk({"tool_calls": [tool_delta(0, arguments='{"a": 1}')]}, "tool_calls"),
    )
    assert turn.tool_calls[0].arguments == '{"a": 1}'
    assert not [e for e in events if isinstance(e, WarningEvent)]  # not appended, then repaired away


def test_missing_index_continues_the_latest_call():
    turn, _ = assemble(
        chunk({"tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a"'}}]}),
        chunk({"tool_calls": [{"function": {"arguments": ": 2}"}}]}),
    )
    assert [(c.id, c.arguments) for c in turn.tool_calls] == [("c1", '{"a": 2}')]


def test_index_reused_with_new_id_and_name_starts_a_new_call():
    turn, _ = assemble(
        chunk({"tool_calls": [tool_delta(0, "c1", "f", '{"n": 1}')]}),
        chunk({"tool_calls": [tool_delta(0, "c2", "f", '{"n": 2}')]}),
    )
    assert [(c.id, c.index, c.arguments) for c in turn.tool_calls] == [("c1", 0, '{"n": 1}'), ("c2", 1, '{"n": 2}')]


def test_fresh_id_without_name_continues_the_open_call_and_keeps_first_id():
    turn, _ = assemble(
        chunk({"tool_calls": [tool_delta(0, "c1", "f", '{"n": ')]}),
        chunk({"tool_calls": [tool_delta(0, "c9", None, "1}")]}),
    )
    assert [(c.id, c.arguments) for c in turn.tool_calls] == [("c1", '{"n": 1}')]


def test_without_ids_a_reused_index_continues_the_call_and_bad_json_is_flagged():
    """Per the contract only a new id (with a name) starts a call; two objects glued are not valid arguments."""
    turn, events = assemble(
        chunk({"tool_calls": [tool_delta(0, None, "f", '{"n": 1}')]}),
        chunk({"tool_calls": [tool_delta(0, None, "f", '{"n": 2}')]}),
    )
    assert [c.id for c in turn.tool_calls] == [""]
    assert any(isinstance(e, WarningEvent) and "repaired" in e.message for e in events)


def test_index_starting_at_one_leaves_no_placeholder():
    turn, _ = assemble(chunk({"tool_calls": [tool_delta(1, "c1", "f", "{}")]}), chunk({"tool_calls": [{"index": 0}]}))
    assert [(c.id, c.index) for c in turn.tool_calls] == [("c1", 0)]


def test_empty_choices_tool_calls_list_and_extra_fields_are_harmless():
    turn, events = assemble(
        {"choices": [], "prompt_filter_results": [{}]},
        chunk({"content": "Hi", "tool_calls": []}, extra_field=1),
        {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}},
        chunk({}, "stop"),
    )
    assert turn.content == "Hi" and turn.tool_calls == [] and turn.finish_reason == "stop"
    assert turn.usage == {"prompt_tokens": 3, "completion_tokens": 1}
    assert [e for e in events if isinstance(e, TextDelta)] == [TextDelta("Hi")]


def test_usage_after_finish_does_not_change_finish_reason():
    turn, _ = assemble(chunk({"content": "x"}, "length"), {"choices": [], "usage": {"total_tokens": 9}})
    assert turn.finish_reason == "length" and turn.usage == {"total_tokens": 9}


def test_reasoning_is_kept_apart_from_content():
    turn, events = assemble(
        chunk({"reasoning_content": "think "}), chunk({"reasoning": "more"}), chunk({"content": "answer"}, "stop"),
    )
    assert turn.reasoning == "think more" and turn.content == "answer"
    assert [e.text for e in events if isinstance(e, ReasoningDelta)] == ["think ", "more"]


def test_text_before_between_and_after_tool_calls_is_kept():
    turn, _ = assemble(
        chunk({"content": "a"}), chunk({"tool_calls": [tool_delta(0, "c1", "f", "{}")]}), chunk({"content": "b"}),
        chunk({"tool_calls": [tool_delta(1, "c2", "g", "{}")]}), chunk({"content": "c"}, "tool_calls"),
    )
    assert turn.content == "abc" and [c.name for c in turn.tool_calls] == ["f", "g"]


def test_surrogate_halves_split_across_text_deltas_are_paired_before_display():
    turn, events = assemble(chunk({"content": "party \ud83c"}), chunk({"content": "\udf89!"}), chunk({}, "stop"))
    shown = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert shown == turn.content == "party 🎉!"
    shown.encode("utf-8")


def test_lone_surrogate_at_end_becomes_replacement_character():
    turn, _ = assemble(chunk({"content": "x\ud83c"}))
    assert turn.content == "x\ufffd"


def test_truncated_arguments_are_repaired_with_a_warning_naming_the_call():
    turn, events = assemble(chunk({"tool_calls": [tool_delta(0, "c1", "save", '{"path": "a.txt", "text": "hel')]}))
    assert json.loads(turn.tool_calls[0].arguments) == {"path": "a.txt", "text": "hel"}
    warnings = [e for e in events if isinstance(e, WarningEvent)]
    assert len(warnings) == 1 and warnings[0].call_id == "c1" and "save" in warnings[0].message


def test_unrepairable_arguments_become_empty_object_with_a_warning():
    turn, events = assemble(chunk({"tool_calls": [tool_delta(0, "c1", "f", "not json at all")]}))
    assert turn.tool_calls[0].arguments == "{}"
    assert any(isinstance(e, WarningEvent) and e.call_id == "c1" for e in events)


def test_empty_arguments_become_empty_object_without_warning():
    turn, events = assemble(chunk({"tool_calls": [tool_delta(0, "c1", "f", "")]}))
    assert turn.tool_calls[0].arguments == "{}"
    assert not [e for e in events if isinstance(e, WarningEvent)]


@pytest.mark.parametrize("reason", ["stop", None, "length"])
def test_tool_turn_whatever_finish_reason_says(reason):
    turn, _ = assemble(chunk({"tool_calls": [tool_delta(0, "c1", "f", "{}")]}, reason))
    assert turn.is_tool_turn and turn.finish_reason == "tool_calls"
    assert ("finish-missing" in turn.rules) is (reason is None)  # the stream ended without one


def test_text_turn_ending_in_length_warns():
    turn, events = assemble(chunk({"content": "cut"}, "length"))
    assert turn.finish_reason == "length" and turn.content == "cut"
    assert any(isinstance(e, WarningEvent) and "length" in e.message for e in events)


def test_tool_call_started_once_per_call_with_id_and_name():
    _, events = assemble(
        chunk({"tool_calls": [tool_delta(0, "c1", "f", "")]}), chunk({"tool_calls": [tool_delta(0, arguments="{}")]}),
        chunk({"tool_calls": [tool_delta(1, "c2", "g", "{}")]}),
    )
    assert [e for e in events if isinstance(e, ToolCallStarted)] == [ToolCallStarted(0, "c1", "f"),
                                                                    ToolCallStarted(1, "c2", "g")]


def test_trace_emits_one_event_per_raw_delta():
    _, events = assemble(chunk({"tool_calls": [tool_delta(0, "c1", "f", "{")]}),
                         chunk({"tool_calls": [tool_delta(0, arguments="}")]}), trace=True)
    assert [e for e in events if isinstance(e, ToolCallDelta)] == [ToolCallDelta(0, "c1", "f", "{"),
                                                                  ToolCallDelta(0, None, None, "}")]


def test_other_choices_are_ignored():
    turn, _ = assemble({"choices": [{"index": 1, "delta": {"content": "other"}},
                                    {"index": 0, "delta": {"content": "me"}}]})
    assert turn.content == "me"


def test_megabyte_of_one_byte_fragments_assembles_exactly():
    payload = json.dumps({"blob": "x" * 1_000_000})
    acc = StreamAccumulator()
    acc.feed(chunk({"tool_calls": [tool_delta(0, "c1", "f", "")]}))
    for ch in payload:
        acc.feed({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ch}}]}}]})
    turn, _ = acc.finish()
    assert turn.tool_calls[0].arguments == payload


def test_name_resent_without_id_after_complete_arguments_is_the_same_call():
    turn, _ = assemble(
        chunk({"tool_calls": [tool_delta(0, "c1", "list_directory", '{"path": "."}')]}),
        chunk({"tool_calls": [tool_delta(0, None, "list_directory", "")]}, "tool_calls"),
    )
    assert [(c.id, c.name, c.arguments) for c in turn.tool_calls] == [("c1", "list_directory", '{"path": "."}')]


def test_new_id_on_every_delta_mid_arguments_is_one_call():
    turn, _ = assemble(
        chunk({"tool_calls": [tool_delta(0, "id1", "f", '{"pa')]}),
        chunk({"tool_calls": [tool_delta(0, "id2", "f", 'th":')]}),
        chunk({"tool_calls": [tool_delta(0, "id3", "f", '"."}')]}),
    )
    assert [(c.id, c.arguments) for c in turn.tool_calls] == [("id1", '{"path":"."}')]


def test_tool_calls_sent_as_an_object_instead_of_a_list():
    turn, _ = assemble(chunk({"tool_calls": tool_delta(0, "c1", "f", "{}")}))
    assert [c.id for c in turn.tool_calls] == ["c1"]


def test_text_turn_without_finish_reason_warns():
    _, events = assemble(chunk({"content": "x"}, None))
    assert any(isinstance(e, WarningEvent) and "without a finish_reason" in e.message for e in events)


def test_a_content_filter_warns_on_a_tool_turn_and_leaves_a_text_turn_to_the_loop():
    """A text turn the filter stopped ends the run as an error (the loop's `ContentFiltered`): no warning
    beside it; a tool turn so stopped warns that its arguments may be incomplete."""
    turn, events = assemble(chunk({"content": "x"}, "content_filter"))
    assert turn.finish_reason == "content_filter" and not any(isinstance(e, WarningEvent) for e in events)
    _, events = assemble(chunk({"tool_calls": [tool_delta(0, "c1", "f", "{}")]}, "content_filter"))
    assert any(isinstance(e, WarningEvent) and "content filter" in e.message for e in events)


def test_repeated_names_without_ids_stay_linear():
    """Every delta re-sends the name (no id): no re-join of the arguments per delta."""
    acc = StreamAccumulator()
    acc.feed(chunk({"tool_calls": [tool_delta(0, "c1", "f", "")]}))
    payload = json.dumps({"blob": "y" * 200_000})
    joins = 0
    original = _PartialCall.joined

    def counting(self):
        nonlocal joins
        joins += 1
        return original(self)

    _PartialCall.joined = counting
    try:
        for i in range(0, len(payload), 4):
            acc.feed(chunk({"tool_calls": [tool_delta(0, None, "f", payload[i : i + 4])]}))
    finally:
        _PartialCall.joined = original
    assert joins <= 2  # was one join per delta (50,000 here) before
    assert acc.finish()[0].tool_calls[0].arguments == payload

# Argument fragments at an index that never opened a call.
# One server gave a call's header (id, name) the index of the tool in the request's `tools` list and its
# argument deltas the index of the call in the response. Rule: fragments at an index that never got an
# id or a name belong to the one call whose own arguments are still empty or incomplete; with none or
# several such calls they are dropped with a warning; a call without a name is never sent back or run.


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


# A lone surrogate half outside text ("c\ud83e" in a tool call id, a gateway cut an emoji apart) can be
# neither stored nor sent: it becomes U+FFFD as in text, in the id, the name and what was attached
def test_lone_surrogates_outside_text_become_replacement_characters() -> None:
    turn, _ = assemble(
        chunk({"reasoning_details": [{"type": "reasoning.text", "index": 0, "text": "a", "signature": "s\ud83e"}],
               "x_extra": {"k\udd85": ["v\ud83e\udd85"]}}),
        chunk({"tool_calls": [{"index": 0, "id": "c\ud83e", "type": "function", "extra_content": {"sig": "\udd85"},
                               "function": {"name": "list_directory\ud83e", "arguments": "{}"}}]}),
        chunk({}, "tool_calls"))
    [call] = turn.tool_calls
    assert (call.id, call.name, call.extra) == ("c\ufffd", "list_directory\ufffd", {"extra_content": {"sig": "\ufffd"}})
    assert turn.fields["reasoning_details"][0]["signature"] == "s\ufffd"
    assert turn.fields["x_extra"] == {"k\ufffd": ["v\U0001f985"]}
    json.dumps(turn.to_message(), ensure_ascii=False).encode("utf-8")  # storable and sendable


# Llama.cpp streams `prompt_progress` (with return_progress) before the first token: a notice
def test_llama_cpps_prompt_progress_is_a_notice_and_timings_are_kept() -> None:
    from crow_cli.events import Notice

    acc = StreamAccumulator()
    progress = chunk({"role": "assistant", "content": None},
                     prompt_progress={"total": 8000, "cache": 0, "processed": 2048, "time_ms": 900})
    assert acc.feed(progress) == [Notice("processing the prompt (2,048 of 8,000 tokens)…", code="prompt_progress")]
    assert acc.feed(chunk({}, prompt_progress={"total": "x", "processed": None})) == []  # not numbers: nothing
    acc.feed(chunk({"content": "Hi"}))
    acc.feed(chunk({}, "stop", usage={"prompt_tokens": 12, "completion_tokens": 1},
                   timings={"prompt_n": 12, "cache_n": 7988}))
    turn, _events = acc.finish()
    assert turn.content == "Hi" and turn.timings == {"prompt_n": 12, "cache_n": 7988}


# A text-valued delta key crow does not know, streamed in pieces (reasoning under a new name), is joined;
# a value sent whole on every delta is kept once, and the join is bounded
def test_an_unknown_text_key_streamed_in_pieces_is_joined():
    turn, _ = assemble(chunk({"thoughts": "Let me "}), chunk({"thoughts": "check."}),
                       chunk({"content": "4", "provider": "acme"}), chunk({"provider": "acme"}, "stop"))
    assert turn.fields == {"thoughts": "Let me check.", "provider": "acme"}


def test_an_unknown_text_key_is_cut_at_its_bound_and_debug_names_it_once(monkeypatch):
    import crow_cli.wire.reasoning as reasoning

    monkeypatch.setattr(reasoning, "_FIELD_TEXT_CHARS", 10)
    acc = StreamAccumulator(trace=True)
    events = [e for n in range(5) for e in acc.feed(chunk({"thoughts": f"abc{n}"}))]
    turn, _ = acc.finish()
    assert turn.fields["thoughts"] == "abc0abc1"
    notes = [e.message for e in events if getattr(e, "code", "") == "debug"]
    assert sum("'thoughts' arrives in pieces" in n for n in notes) == 1
    assert sum("'thoughts' is over 10 characters" in n for n in notes) == 1


# With n > 1 a server streams each choice in its own chunks; choice 1 after choice 0 finished is not
# assembled into the turn as if a counting runtime had numbered its one choice
def _choice(index, delta, finish=None):
    return {"choices": [{"index": index, "delta": delta, "finish_reason": finish}]}


@pytest.mark.parametrize("n", [1, 2])
def test_other_choices_are_ignored_with_one_notice_not_merged(n):
    from crow_cli.events import Notice

    acc = StreamAccumulator(choices=n)
    events = []
    for piece in ([_choice(0, {"content": "first"}), _choice(0, {}, "stop"), _choice(1, {"content": "second"}),
                   _choice(1, {"content": " more"}), _choice(1, {}, "stop")]):
        events += acc.feed(piece)
    turn, _ = acc.finish()
    assert turn.content == "first"
    assert [e.code for e in events if isinstance(e, Notice)] == ["choices_ignored"]


def test_n_above_one_ignores_interleaved_choices():
    acc = StreamAccumulator(choices=2)
    for piece in ([_choice(0, {"content": "a"}), _choice(1, {"content": "X"}), _choice(0, {"content": "b"}),
                   _choice(1, {}, "stop"), _choice(0, {}, "stop")]):
        acc.feed(piece)
    assert acc.finish()[0].content == "ab"


# A template's tags in the answer (SmolLM2 under crow's Hermes-style template in llama.cpp: "The result is
# 4.\n</tool_response>") are neither shown nor stored
@pytest.mark.parametrize("pieces", [
    ["The result is 4.", "\n</tool_", "response>"],
    ["</tool_response>\n", "The result is 4.\n"],
    ["The result is 4.<|im_", "end|>"],
    ["<", "tool_call>", "\nThe result is 4.</tool_call>"],
])
def test_leaked_template_tags_are_neither_shown_nor_stored(pieces: list[str]) -> None:
    turn, events = assemble(*[chunk({"content": p}) for p in pieces], chunk({}, "stop"))
    shown = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert shown.strip() == "The result is 4." and turn.content.strip() == "The result is 4."
    assert "template-tags-in-content" in turn.rules


def test_text_that_only_looks_like_the_start_of_a_tag_is_kept() -> None:
    turn, events = assemble(chunk({"content": "a <tool"}), chunk({"content": " b < c <"}), chunk({}, "stop"))
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "a <tool b < c <"
    assert turn.content == "a <tool b < c <" and "template-tags-in-content" not in turn.rules


# provenance: a mutation check (w5) — a call's attached keys taking the last value, a reasoning piece of another
# signature merged into the block before, and `cut_off` dropped each passed every test of this file
def test_a_key_attached_to_a_call_keeps_its_first_value():
    first = {"google": {"thought_signature": "G1"}}
    turn, _ = assemble(
        chunk({"tool_calls": [{**tool_delta(0, "c1", "f", "{}"), "extra_content": first}]}),
        chunk({"tool_calls": [{"index": 0, "extra_content": {"google": {"thought_signature": "G2"}}}]}, "tool_calls"),
    )
    assert turn.tool_calls[0].extra == {"extra_content": first}


def test_a_reasoning_piece_with_another_signature_is_a_block_of_its_own():
    pieces = [{"type": "reasoning.text", "text": "a", "signature": "S1", "index": 0},
              {"type": "reasoning.text", "signature": "S2"}]  # no index, no text: only its signature tells
    turn, _ = assemble(*(chunk({"reasoning_details": [p]}) for p in pieces), chunk({"content": "x"}, "stop"))
    assert turn.fields["reasoning_details"] == pieces


def test_arguments_the_repair_had_to_guess_mark_the_call_cut_off():
    turn, _ = assemble(chunk({"tool_calls": [tool_delta(0, "c1", "f", '{"path": "a.txt", "content": "li')]}),
                       chunk({}, "tool_calls"))
    assert turn.tool_calls[0].cut_off

SIG = "EqQBCkYIBxgCKkB+/sig=="


def details(*blocks):
    return chunk({"reasoning_details": list(blocks)})


def test_reasoning_blocks_merge_by_index_and_type_text_joined_other_fields_first_non_empty():
    # OpenRouter in front of Anthropic: an empty opener, text pieces, a signature-only tail, then an
    # encrypted block at the same index (another type: a block of its own)
    turn, events = assemble(
        details({"type": "reasoning.text", "text": "", "index": 0, "format": "anthropic-claude-v1", "signature": None}),
        details({"type": "reasoning.text", "text": "Need the", "index": 0}),
        details({"type": "reasoning.text", "text": " weather.", "index": 0, "format": ""}),
        details({"type": "reasoning.text", "text": "", "signature": SIG, "index": 0}),
        details({"type": "reasoning.encrypted", "data": "ENC", "index": 0, "format": "anthropic-claude-v1"}),
        details({"type": "reasoning.text", "signature": "later-never-replaces", "index": 0}),
        chunk({"tool_calls": [tool_delta(0, "c1", "f", "{}")]}, "tool_calls"),
    )
    assert turn.fields["reasoning_details"] == [
        {"type": "reasoning.text", "text": "Need the weather.", "index": 0, "format": "anthropic-claude-v1",
         "signature": SIG},
        {"type": "reasoning.encrypted", "data": "ENC", "index": 0, "format": "anthropic-claude-v1"},
    ]
    assert [e.text for e in events if isinstance(e, ReasoningDelta)] == ["Need the", " weather."]
    assert turn.to_message()["reasoning_details"] == turn.fields["reasoning_details"]
    assert {"reasoning-blocks-merged", "reasoning-block-type-at-used-index"} <= set(turn.rules)


def test_reasoning_blocks_keep_their_order_and_a_piece_without_index_joins_the_latest():
    turn, _ = assemble(
        details({"type": "reasoning.summary", "summary": "First", "index": 0}),
        details({"type": "reasoning.summary", "summary": " part.", "index": 0}),
        details({"type": "reasoning.summary", "summary": "Second", "index": 1}),
        details({"type": "reasoning.summary", "summary": " part."}),
        chunk({"content": "ok"}, "stop"),
    )
    assert turn.fields["reasoning_details"] == [{"type": "reasoning.summary", "summary": "First part.", "index": 0},
                                                {"type": "reasoning.summary", "summary": "Second part.", "index": 1}]


def test_a_megabyte_of_block_text_in_one_byte_pieces_is_joined_exactly():
    text = "x" * 100_000
    acc = StreamAccumulator()
    for ch in text:
        acc.feed(details({"type": "reasoning.text", "text": ch, "index": 0}))
    turn, _ = acc.finish()
    assert turn.fields["reasoning_details"] == [{"type": "reasoning.text", "text": text, "index": 0}]


def test_reasoning_is_kept_under_each_name_it_came_in_and_shown_once_per_delta():
    # newer vLLM sends the same piece under both names; each is kept as sent, shown once
    turn, events = assemble(chunk({"reasoning_content": "a", "reasoning": "a"}), chunk({"reasoning": "b"}),
                            chunk({"content": "done"}, "stop"))
    assert turn.fields == {"reasoning_content": "a", "reasoning": "ab"}
    assert [e.text for e in events if isinstance(e, ReasoningDelta)] == ["a", "b"]
    message = turn.to_message()
    assert message["reasoning_content"] == "a" and message["reasoning"] == "ab" and message["content"] == "done"


def test_think_in_content_is_kept_verbatim_and_shown_as_reasoning():
    # MiniMax / llama.cpp templates: the tags arrive split across chunks
    pieces = ["  <thi", "nk>\nI should", " list.</th", "ink>\n\nHere ", "it is."]
    turn, events = assemble(*(chunk({"content": p}) for p in pieces), chunk({}, "stop"))
    assert turn.content == "".join(pieces)
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == "\nI should list."
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Here it is."
    assert "think-in-content" in turn.rules


def test_content_that_only_looks_like_a_tag_is_answer_text():
    for pieces in (["<thin", "g>"], ["<", "b>bold</b>"], ["x <think>y</think>"]):
        turn, events = assemble(*(chunk({"content": p}) for p in pieces), chunk({}, "stop"))
        assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "".join(pieces) == turn.content
        assert not [e for e in events if isinstance(e, ReasoningDelta)]


def test_an_unclosed_think_block_is_all_reasoning_and_still_kept():
    turn, events = assemble(chunk({"content": "<think>cut off"}), chunk({}, "length"))
    assert turn.content == "<think>cut off"
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == "cut off"


def test_unknown_tool_call_keys_are_kept_on_that_call_only_and_never_invented():
    # Gemini via Vertex's OpenAI-compatible endpoint: the first call carries a thought signature
    sig = {"google": {"thought_signature": "CiQB0e2K+/=="}}
    turn, _ = assemble(
        chunk({"tool_calls": [{**tool_delta(0, "c1", "f", '{"a": 1}'), "extra_content": sig}]}),
        chunk({"tool_calls": [{**tool_delta(0, arguments=""), "extra_content": None}]}),
        chunk({"tool_calls": [tool_delta(1, "c2", "g", "{}")]}),
        chunk({"tool_calls": [{"index": 1, "function": {"arguments": "", "thought": "t"}}]}, "tool_calls"),
    )
    first, second = (c.to_wire() for c in turn.tool_calls)
    assert first == {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'},
                     "extra_content": sig}
    assert second == {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}", "thought": "t"}}
    assert "tool-call-fields" in turn.rules


def test_unknown_message_keys_are_kept_from_their_first_non_empty_value():
    turn, _ = assemble(chunk({"role": "assistant", "content": "", "audio": None, "extra_content": {}}),
                       chunk({"content": "hi", "extra_content": {"google": {"thought_signature": "s"}}}),
                       chunk({"extra_content": {"google": {"thought_signature": "other"}}}, "stop"))
    assert turn.fields == {"extra_content": {"google": {"thought_signature": "s"}}}
    assert turn.to_message() == {"role": "assistant", "content": "hi",
                                 "extra_content": {"google": {"thought_signature": "s"}}}


def test_null_name_on_continuations_and_upper_case_type_are_not_values():
    turn, _ = assemble(
        chunk({"tool_calls": [{"index": 0, "id": "c1", "type": "FUNCTION",
                               "function": {"name": "f", "arguments": ""}}]}),
        chunk({"tool_calls": [{"index": 0, "type": "FUNCTION", "function": {"name": "null", "arguments": '{"a"'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"name": "null", "arguments": ": 1}"}}]}, "tool_calls"),
    )
    assert [c.to_wire() for c in turn.tool_calls] == [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]
    assert "name-null-on-continuation" in turn.rules


def test_one_choice_whose_index_counts_up_is_one_answer_with_one_warning():
    chunks = [chunk({"content": p}) for p in ("a", "b", "c")] + [chunk({}, "stop")]
    for n, c in enumerate(chunks):
        c["choices"][0]["index"] = n
    turn, events = assemble(*chunks)
    assert turn.content == "abc" and turn.finish_reason == "stop"
    warnings = [e for e in events if isinstance(e, WarningEvent) and "numbered its one choice" in e.message]
    assert len(warnings) == 1


def test_rules_name_what_fired_and_trace_says_why_once():
    turn, events = assemble(chunk({"tool_calls": [{**tool_delta(0, "c1", "f", '{"a": 1}'), "x": 1}]}),
                            chunk({"tool_calls": [{**tool_delta(0, arguments=""), "x": 2}]}),
                            chunk({"tool_calls": [tool_delta(0, arguments='{"a": 1}')]}, "tool_calls"), trace=True)
    assert turn.rules == ["tool-call-fields", "arguments-repeated"]
    assert len([e for e in events if isinstance(e, Notice) and e.code == "debug"]) == 1
    assert json.loads(turn.tool_calls[0].arguments) == {"a": 1} and turn.tool_calls[0].extra == {"x": 1}


@pytest.mark.parametrize("case", [c for c in load_cases() if c["expected"].get("finish_reason") != "error"],
                         ids=lambda c: c["id"])
def test_the_hot_path_assembles_what_the_general_path_does(case):
    # trace=True takes every chunk the general way; without it, one-key text and fragment chunks take the fast one
    chunks = list(sse_chunks(expected_sse(case)))
    try:
        fast, _ = assemble(*chunks)
    except ServerError:
        return
    slow, _ = assemble(*chunks, trace=True)
    assert fast.to_message() == slow.to_message() and fast.rules == slow.rules


def test_a_block_piece_that_names_no_type_continues_the_latest_block_at_its_index():
    turn, _ = assemble(details({"type": "reasoning.text", "text": "a", "index": 0}), details({"text": "b", "index": 0}),
                       details({"signature": "S", "index": 0}), chunk({"content": "x"}, "stop"))
    assert turn.fields["reasoning_details"] == [{"type": "reasoning.text", "text": "ab", "index": 0, "signature": "S"}]


def test_leading_whitespace_is_shown_at_once_and_a_think_block_may_still_follow():
    # the loop's cancel handling waits on the first text event: whitespace must not be held back
    acc = StreamAccumulator()
    assert acc.feed(chunk({"content": " "})) == [TextDelta(" ")]
    assert acc.feed(chunk({"content": "<think>hm</think>ok"})) == [ReasoningDelta("hm"), TextDelta("ok")]
    turn, _ = acc.finish()
    assert turn.content == " <think>hm</think>ok"


def thinking(*blocks, reasoning=None):
    """A LiteLLM proxy delta in front of Anthropic: `thinking_blocks` pieces (no index) beside reasoning_content."""
    delta = {"reasoning_content": reasoning} if reasoning is not None else {}
    return chunk({**delta, "thinking_blocks": list(blocks)})


# LiteLLM's Anthropic stream: each delta carries one `thinking_blocks` piece with no index and a signature-only
# piece ends the block; the pieces merge into one signed block (the first piece alone, text cut and signature
# lost, is a turn Anthropic refuses)
def test_litellm_thinking_blocks_merge_into_one_signed_block_and_a_text_after_a_signature_starts_another():
    turn, events = assemble(
        thinking({"type": "thinking", "thinking": "Need the", "signature": None}, reasoning="Need the"),
        thinking({"type": "thinking", "thinking": " weather.", "signature": None}, reasoning=" weather."),
        thinking({"type": "thinking", "thinking": "", "signature": SIG}),
        thinking({"type": "redacted_thinking", "data": "REDACTED-1"}),
        thinking({"type": "thinking", "thinking": "Then Rome.", "signature": None}, reasoning="Then Rome."),
        thinking({"type": "thinking", "thinking": "", "signature": "Sig-two=="}),
        chunk({"tool_calls": [tool_delta(0, "toolu_1", "f", "{}")]}, "tool_calls"),
    )
    assert turn.fields["thinking_blocks"] == [
        {"type": "thinking", "thinking": "Need the weather.", "signature": SIG},
        {"type": "redacted_thinking", "data": "REDACTED-1"},
        {"type": "thinking", "thinking": "Then Rome.", "signature": "Sig-two=="},
    ]
    assert turn.fields["reasoning_content"] == "Need the weather.Then Rome."
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == "Need the weather.Then Rome."
    assert turn.to_message()["thinking_blocks"] == turn.fields["thinking_blocks"]


# Two redacted_thinking blocks in a row (LiteLLM sends each whole, no index) stay two, each with its `data`:
# Anthropic refuses a turn whose blocks differ
def test_an_unindexed_piece_that_would_overwrite_a_kept_field_starts_a_new_block():
    turn, _ = assemble(
        thinking({"type": "redacted_thinking", "data": "R-1"}),
        thinking({"type": "redacted_thinking", "data": "R-2"}),
        thinking({"type": "thinking", "thinking": "t", "signature": None}),
        thinking({"type": "thinking", "thinking": "", "signature": "S-1"}),
        thinking({"type": "thinking", "thinking": "", "signature": "S-2"}),
        chunk({"content": "ok"}, "stop"),
    )
    assert turn.fields["thinking_blocks"] == [
        {"type": "redacted_thinking", "data": "R-1"}, {"type": "redacted_thinking", "data": "R-2"},
        {"type": "thinking", "thinking": "t", "signature": "S-1"},
        {"type": "thinking", "thinking": "", "signature": "S-2"},
    ]
    indexed, _ = assemble(  # an index says which block a piece belongs to: a repeated value there is kept first
        chunk({"reasoning_details": [{"type": "reasoning.encrypted", "data": "E", "index": 0}]}),
        chunk({"reasoning_details": [{"type": "reasoning.encrypted", "data": "E", "index": 0}]}),
        chunk({"content": "ok"}, "stop"),
    )
    assert indexed.fields["reasoning_details"] == [{"type": "reasoning.encrypted", "data": "E", "index": 0}]


# LiteLLM repeats each thinking piece in `provider_specific_fields.thinking_blocks`; those merge as the
# top-level ones, so no first piece alone (text cut, no signature) goes back beside the merged blocks
def test_blocks_inside_another_attached_field_are_merged_as_the_top_level_ones():
    def litellm(piece, reasoning=None):
        return chunk({**({"reasoning_content": reasoning} if reasoning else {}), "thinking_blocks": [piece],
                      "provider_specific_fields": {"thinking_blocks": [piece], "citations": None}})
    turn, events = assemble(
        litellm({"type": "thinking", "thinking": "Need", "signature": None}, "Need"),
        litellm({"type": "thinking", "thinking": " it.", "signature": None}, " it."),
        litellm({"type": "thinking", "thinking": "", "signature": SIG}),
        chunk({"provider_specific_fields": {"citations": ["c"]}}),
        chunk({"content": "ok"}, "stop"),
    )
    block = {"type": "thinking", "thinking": "Need it.", "signature": SIG}
    assert turn.fields["thinking_blocks"] == [block]
    assert turn.fields["provider_specific_fields"] == {"thinking_blocks": [block], "citations": ["c"]}
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == "Need it."  # shown once
    other, _ = assemble(chunk({"x_vendor": {"a": 1}}), chunk({"x_vendor": {"a": 2}}), chunk({"content": "ok"}, "stop"))
    assert other.fields["x_vendor"] == {"a": 1}  # any other attached object: its first value, as before


# A text part before the first thinking part of the same delta keeps its place in the parts that go back
def test_a_text_part_before_the_first_thinking_part_of_its_delta_keeps_its_place():
    turn, _ = assemble(mistral({"type": "text", "text": "A"}, {"type": "thinking", "thinking": [{"type": "text",
                                                                                                 "text": "T"}]}),
                       chunk({"content": "B"}, "stop"))
    assert turn.content == "AB"
    assert turn.to_message()["content"] == [{"type": "text", "text": "A"},
                                            {"type": "thinking", "thinking": [{"type": "text", "text": "T"}]},
                                            {"type": "text", "text": "B"}]


# A thinking chunk with no text chunks (`"thinking": []`) goes back as sent, not as
# `[{"type": "text", "text": ""}]`
def test_a_thinking_part_without_text_goes_back_as_it_came():
    turn, events = assemble(mistral({"type": "thinking", "thinking": []}), chunk({"content": "ok"}, "stop"))
    assert turn.to_message()["content"] == [{"type": "thinking", "thinking": []}, {"type": "text", "text": "ok"}]
    assert not [e for e in events if isinstance(e, ReasoningDelta)]


def mistral(*parts):
    return chunk({"content": list(parts)})


# Magistral / reasoning_effort models stream their thinking as typed content chunks: the thinking is shown and
# the parts go back as they came, as Mistral's clients send them
def test_mistral_thinking_chunks_are_shown_and_the_content_goes_back_as_the_parts_sent():
    turn, events = assemble(
        mistral({"type": "thinking", "thinking": [{"type": "text", "text": "The user wants"}]}),
        mistral({"type": "thinking", "thinking": [{"type": "text", "text": " the weather."}]}),
        chunk({"content": "Paris is"}),
        mistral({"type": "text", "text": " sunny."}),
        chunk({}, "stop"),
    )
    assert turn.content == "Paris is sunny." and turn.reasoning == "The user wants the weather."
    assert [e.text for e in events if isinstance(e, ReasoningDelta)] == ["The user wants", " the weather."]
    assert turn.to_message()["content"] == [
        {"type": "thinking", "thinking": [{"type": "text", "text": "The user wants the weather."}]},
        {"type": "text", "text": "Paris is sunny."},
    ]


def test_text_before_the_first_thinking_part_keeps_its_place_and_text_only_parts_stay_a_string():
    turn, _ = assemble(chunk({"content": "A"}), mistral({"type": "thinking", "thinking": "t"}),
                       mistral({"type": "text", "text": "B"}), chunk({}, "stop"))
    assert turn.to_message()["content"] == [{"type": "text", "text": "A"}, {"type": "thinking", "thinking": "t"},
                                            {"type": "text", "text": "B"}]
    plain, _ = assemble(mistral({"type": "text", "text": "x"}), mistral({"type": "text", "text": "y"}),
                        chunk({}, "stop"))
    assert plain.to_message()["content"] == "xy" and plain.parts is None


def test_content_parts_re_pair_a_surrogate_split_across_chunks_and_mend_a_lone_half():
    # an emoji's two UTF-16 halves in two thinking chunks and two text parts (as the openclaw case splits
    # text), and a lone half: the parts are stored and sent, so they must hold only real code points
    turn, _ = assemble(mistral({"type": "thinking", "thinking": [{"type": "text", "text": "a\ud83e"}]}),
                       mistral({"type": "thinking", "thinking": [{"type": "text", "text": "\udd85b"}]}),
                       mistral({"type": "text", "text": "c\ud83e"}), mistral({"type": "text", "text": "\udd85\ud800"}),
                       chunk({}, "stop"))
    assert turn.parts == [{"type": "thinking", "thinking": [{"type": "text", "text": "a\U0001f985b"}]},
                          {"type": "text", "text": "c\U0001f985\ufffd"}]
    json.dumps(turn.to_message(), ensure_ascii=False).encode()  # storable as UTF-8

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
names = st.from_regex(r"[a-z][a-z0-9_]{0,11}", fullmatch=True)


@st.composite
def tool_calls(draw: st.DrawFn) -> list[tuple[str, str, str]]:
    """1–4 calls with distinct non-empty ids, names and JSON-object arguments (possibly `{}`)."""
    count = draw(st.integers(1, 4))
    ids = draw(st.lists(st.from_regex(r"call_[A-Za-z0-9]{1,10}", fullmatch=True), min_size=count, max_size=count,
                        unique=True))
    return [(ids[i], draw(names), json.dumps(draw(st.dictionaries(st.text(max_size=8), json_values, max_size=4)),
                                             ensure_ascii=draw(st.booleans())))
            for i in range(count)]


def _split(draw: st.DrawFn, text: str) -> list[str]:
    cuts = sorted(draw(st.sets(st.integers(0, len(text)), max_size=6)))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


@st.composite
def rechunked(draw: st.DrawFn) -> tuple[list[tuple[str, str, str]], list[dict[str, Any]]]:
    """The calls, and one of the many chunk sequences that stream them."""
    calls = draw(tool_calls())
    per_call: list[list[dict[str, Any]]] = []
    for index, (call_id, name, arguments) in enumerate(calls):
        pieces = _split(draw, arguments)
        first_args = pieces.pop(0) if draw(st.booleans()) else ""
        deltas = [{"index": index, "id": call_id, "type": "function",
                   "function": {"name": name, "arguments": first_args}}]
        for piece in pieces:
            delta: dict[str, Any] = {"index": index, "function": {"arguments": piece}}
            if draw(st.booleans()):  # DashScope-style empty continuations
                delta["id"] = ""
                delta["function"]["name"] = ""
            if draw(st.booleans()):
                delta["type"] = "function"
            deltas.append(delta)
        per_call.append(deltas)
    # interleave: any order that keeps each call's own order and opens calls in index order
    order: list[dict[str, Any]] = []
    cursors = [0] * len(calls)
    while any(c < len(d) for c, d in zip(cursors, per_call, strict=True)):
        ready = [i for i, d in enumerate(per_call) if cursors[i] < len(d) and (cursors[i] > 0 or i == 0
                 or cursors[i - 1] > 0)]
        i = draw(st.sampled_from(ready))
        order.append(per_call[i][cursors[i]])
        cursors[i] += 1
    # group consecutive deltas into chunks; sprinkle usage-only chunks
    chunks: list[dict[str, Any]] = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": None},
                                                  "finish_reason": None}]}]
    position = 0
    while position < len(order):
        size = draw(st.integers(1, 3))
        group = order[position:position + size]
        if len({d["index"] for d in group}) < len(group):  # one entry per index in a single delta
            group = group[:1]
        position += len(group)
        chunks.append({"choices": [{"index": 0, "delta": {"tool_calls": group}, "finish_reason": None}]})
        if draw(st.integers(0, 4)) == 0:
            chunks.append({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": position}})
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    if draw(st.booleans()):
        chunks.append({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}})
    return calls, chunks


@settings(max_examples=150, deadline=None)
@given(rechunked())
def test_any_rechunking_assembles_the_same_calls(case: tuple[list[tuple[str, str, str]], list[dict[str, Any]]]) -> None:
    calls, chunks = case
    accumulator = StreamAccumulator()
    for piece in chunks:
        accumulator.feed(piece)
    turn, _ = accumulator.finish()
    assert [(c.id, c.name, json.loads(c.arguments)) for c in turn.tool_calls] == \
        [(i, n, json.loads(a)) for i, n, a in calls]
    assert [c.index for c in turn.tool_calls] == list(range(len(calls)))
    assert turn.finish_reason == "tool_calls" and turn.content is None

REFUSAL = "I can't help with that."


def _assemble(*chunks):
    acc = StreamAccumulator()
    events = []
    for c in chunks:
        events += acc.feed(c)
    turn, tail = acc.finish()
    return turn, events + tail


def test_streamed_refusal_is_assembled_warned_and_sent_back_in_an_accepted_shape():
    turn, events = _assemble(chunk({"role": "assistant", "content": None, "refusal": "I can't "}),
                             chunk({"refusal": "help with that."}), chunk({}, "stop"))
    assert turn.refusal == REFUSAL and turn.content is None
    assert not [e for e in events if isinstance(e, TextDelta)]
    warnings = [e.message for e in events if isinstance(e, WarningEvent)]
    assert warnings == [f"the model refused: {REFUSAL}"]
    # OpenAI: assistant `content` is required without tool_calls; `refusal` is a field it accepts.
    assert turn.to_message() == {"role": "assistant", "content": REFUSAL, "refusal": REFUSAL}


def test_no_text_no_calls_no_refusal_is_an_empty_answer_warning():
    _, events = _assemble(chunk({"role": "assistant", "content": ""}), chunk({}, "stop"))
    assert [e.message for e in events if isinstance(e, WarningEvent)] == ["the model returned an empty answer"]
    _, events = _assemble(chunk({"content": "hi"}, "stop"))
    assert not [e for e in events if isinstance(e, WarningEvent)]


async def test_cli_shows_a_refusal_and_stores_it(tmp_path):
    body = sse(chunk({"role": "assistant", "content": None, "refusal": REFUSAL}), chunk({}, "stop"))
    ran = await run_here([{"sse": body}], json=True, cwd=tmp_path, model="m")
    assert ran.code == 0, ran.stderr
    assert {"type": "warning", "message": f"the model refused: {REFUSAL}", "call_id": None} in ran.events()
    ran = await run_here([{"sse": body}], cwd=tmp_path, model="m")
    assert ran.code == 0 and f"crow: warning: the model refused: {REFUSAL}" in ran.stderr
    # the stored session goes back
    ran = await run_here([{"sse": sse(chunk({"content": "ok"}, "stop"))}], "next", continue_last=True,
                         cwd=tmp_path, model="m")
    assert ran.code == 0, ran.stderr
    sent = [m for m in ran.requests[0]["messages"] if m["role"] == "assistant"]
    assert sent == [{"role": "assistant", "content": REFUSAL, "refusal": REFUSAL}]


async def test_cli_warns_about_an_empty_answer(tmp_path):
    body = sse(chunk({"role": "assistant", "content": ""}), chunk({}, "stop"))
    ran = await run_here([{"sse": body}], cwd=tmp_path, model="m")
    assert ran.code == 0 and ran.stdout == ""
    assert "crow: warning: the model returned an empty answer" in ran.stderr


def test_an_empty_text_turn_is_stored_with_empty_content_not_null() -> None:
    # An empty answer is stored and sent back with content "", not null, which
    # servers reject (content is required without tool_calls) on every later turn of the session.
    from crow_cli.history import AssistantTurn, ToolCall, assistant_message

    assert AssistantTurn(content=None).to_message() == {"role": "assistant", "content": ""}
    assert assistant_message(None) == {"role": "assistant", "content": ""}
    with_calls = assistant_message(None, [ToolCall("c1", "f", "{}")])
    assert with_calls["content"] is None and with_calls["tool_calls"][0]["id"] == "c1"


def test_an_answer_filed_only_as_reasoning_is_the_answer():
    """content null, finish_reason stop, the whole answer as reasoning (vLLM's Nemotron parser): shown as text,
    kept as content, not kept as reasoning too; cut by the token limit it stays reasoning."""
    turn, events = assemble(chunk({"content": None, "reasoning": "Paris."}), chunk({}, "stop"))
    assert (turn.content, turn.reasoning, turn.fields.get("reasoning")) == ("Paris.", None, None)
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Paris."]
    assert any(isinstance(e, WarningEvent) and "reasoning field" in e.message for e in events)
    turn, _ = assemble(chunk({"content": None, "reasoning": "Let me think"}), chunk({}, "length"))
    assert (turn.content, turn.reasoning) == (None, "Let me think")


def test_a_custom_tool_call_is_kept_under_its_id_and_one_without_an_id_dropped():
    """type "custom" (OpenAI's freeform tools): the name from custom.name, the input joined from its pieces; with
    an id it is kept (marked custom, to be answered), without one dropped; each said in one warning."""
    turn, events = assemble(
        chunk({"tool_calls": [{"index": 0, "id": "c1", "type": "custom", "custom": {"name": "sh", "input": "ls "}}]}),
        chunk({"tool_calls": [{"index": 0, "custom": {"input": "-l"}}]}), chunk({}, "tool_calls"))
    [call] = turn.tool_calls
    assert (call.id, call.name, json.loads(call.arguments), call.custom) == ("c1", "sh", {"input": "ls -l"}, True)
    assert call.to_wire() == {"id": "c1", "type": "function", "function": {"name": "sh", "arguments": call.arguments}}
    assert any(isinstance(e, WarningEvent) and "custom tool call sh" in e.message for e in events)
    turn, events = assemble(chunk({"tool_calls": [{"index": 0, "type": "custom", "custom": {"name": "sh"}}]}),
                            chunk({}, "tool_calls"))
    assert turn.tool_calls == [] and any("no id to answer" in e.message for e in events if isinstance(e, WarningEvent))
