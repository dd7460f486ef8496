"""`normalise`: the history that is sent is valid whatever the stored one holds (issue 13, "a valid
history is always sent": found trying long conversations on Mistral/Gemma chat templates)."""

from __future__ import annotations

import copy

from crow_cli.context.normalise import INTERRUPTED_OUTPUT, normalise
from crow_cli.history import ToolCall, assistant_message, tool_message, user_message
from tests.support import assert_contract


def _roles(messages: list[dict]) -> list[str]:
    return [m["role"] for m in messages]


def test_two_user_messages_in_a_row_are_merged_nothing_lost() -> None:
    # a failed turn leaves its user message behind; the next one follows it
    history = [{"role": "system", "content": "sys"}, user_message("first, failed"), user_message("second")]
    before = copy.deepcopy(history)
    sent = normalise(history)
    assert _roles(sent) == ["system", "user"]
    assert sent[1]["content"] == "first, failed\n\nsecond"
    assert history == before  # the stored history is never changed


def test_merging_content_parts_keeps_every_part() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    sent = normalise([user_message("look"), {"role": "user", "content": [image]}])
    assert sent == [{"role": "user", "content": [{"type": "text", "text": "look"}, image]}]


def test_assistant_without_content_or_calls_is_dropped() -> None:
    history = [user_message("a"), {"role": "assistant", "content": None}, user_message("b"),
               assistant_message(""), user_message("c")]
    assert normalise(history) == [{"role": "user", "content": "a\n\nb\n\nc"}]


def test_a_refusal_is_kept() -> None:
    history = [user_message("a"), assistant_message(None, refusal="no"), user_message("b")]
    assert _roles(normalise(history)) == ["user", "assistant", "user"]


def test_tool_result_without_its_call_is_dropped() -> None:
    history = [user_message("a"), tool_message("call_x", "orphan"), assistant_message("hi"),
               tool_message("call_y", "orphan too"), user_message("b")]
    assert _roles(normalise(history)) == ["user", "assistant", "user"]


def test_extra_results_beyond_the_calls_are_dropped() -> None:
    calls = [ToolCall("c1", "ok", "{}")]
    history = [user_message("a"), assistant_message(None, calls), tool_message("c1", "r1"), tool_message("c1", "dup")]
    sent = normalise(history)
    assert _roles(sent) == ["user", "assistant", "tool"] and sent[2]["content"] == "r1"


def test_unanswered_call_mid_history_gets_an_interrupted_result() -> None:
    calls = [ToolCall("c1", "ok", "{}", 0), ToolCall("", "ok", "{}", 1)]
    history = [user_message("a"), assistant_message(None, calls), tool_message("c1", "r1"), user_message("b")]
    sent = normalise(history)
    assert _roles(sent) == ["user", "assistant", "tool", "tool", "user"]
    assert sent[3] == tool_message("", INTERRUPTED_OUTPUT)
    assert_contract(sent)


def test_a_valid_history_is_sent_unchanged() -> None:
    calls = [ToolCall("c1", "ok", "{}")]
    history = [{"role": "system", "content": "s"}, user_message("a"), assistant_message(None, calls),
               tool_message("c1", "r"), assistant_message("done"), user_message("b")]
    assert normalise(history) == history
