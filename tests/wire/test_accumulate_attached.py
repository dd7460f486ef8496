"""What a server attaches to a turn is kept to go back exactly: reasoning blocks, reasoning under each of
its names, `<think>` in content, unknown keys of tool calls and of the message; odd continuation values.

Kinds 1-6 of "reasoning models round-trip exactly" (OpenRouter reasoning_details, DeepSeek / Ollama
reasoning fields, MiniMax <think>, Gemini extra_content, local runtimes' "null" names and counting indexes).
"""

from __future__ import annotations

import json

import pytest

from crow_cli.errors import ServerError
from crow_cli.events import Notice, ReasoningDelta, TextDelta, WarningEvent
from crow_cli.wire.accumulate import StreamAccumulator
from tests.support import assemble, chunk, expected_sse, load_cases, sse_chunks, tool_delta

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


# found reading LiteLLM's Anthropic stream parser (wave 3): each delta carries one `thinking_blocks` piece
# with no index and a signature-only piece ends the block; kept as "first non-empty value", only the first
# piece went back (text cut, signature lost) and Anthropic refuses such a turn
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


# found trying it as a new user (wave 3): two redacted_thinking blocks in a row (LiteLLM sends each whole, no
# index) merged into one and the second's `data` was dropped: Anthropic refuses a turn whose blocks differ
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


# found trying it as a new user (wave 3): LiteLLM repeats each thinking piece in
# `provider_specific_fields.thinking_blocks`; kept as "first non-empty value", the first piece (text cut, no
# signature) went back on every later request beside the merged blocks
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


# found trying it as a new user (wave 3): a text part before the first thinking part of the same delta was
# shown and kept in the text, but missing from the parts that go back
def test_a_text_part_before_the_first_thinking_part_of_its_delta_keeps_its_place():
    turn, _ = assemble(mistral({"type": "text", "text": "A"}, {"type": "thinking", "thinking": [{"type": "text",
                                                                                                 "text": "T"}]}),
                       chunk({"content": "B"}, "stop"))
    assert turn.content == "AB"
    assert turn.to_message()["content"] == [{"type": "text", "text": "A"},
                                            {"type": "thinking", "thinking": [{"type": "text", "text": "T"}]},
                                            {"type": "text", "text": "B"}]


# found trying it as a new user (wave 3): a thinking chunk with no text chunks (`"thinking": []`) went back as
# `[{"type": "text", "text": ""}]`, not as sent
def test_a_thinking_part_without_text_goes_back_as_it_came():
    turn, events = assemble(mistral({"type": "thinking", "thinking": []}), chunk({"content": "ok"}, "stop"))
    assert turn.to_message()["content"] == [{"type": "thinking", "thinking": []}, {"type": "text", "text": "ok"}]
    assert not [e for e in events if isinstance(e, ReasoningDelta)]


def mistral(*parts):
    return chunk({"content": list(parts)})


# found reading Mistral's reasoning docs and clients that had to fix it (wave 3): Magistral / reasoning_effort
# models stream their thinking as typed content chunks; crow kept only text parts, so the thinking was neither
# shown nor sent back (Mistral's clients send the parts back as they came)
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
