"""`crow_cli.history`: wire messages, and closing a history whose tool calls lack results."""

from __future__ import annotations

from crow_cli.history import (
    AssistantTurn,
    ToolCall,
    ToolResult,
    as_json,
    assistant_message,
    content_text,
    outcome_of,
    pending_tool_calls,
    repair_history,
    tool_calls_of,
    tool_message,
    user_message,
)

CALLS = [ToolCall("call_a", "read_file", '{"path": "x"}', 0), ToolCall("", "run_shell", "{}", 1),
         ToolCall("", "run_shell", '{"command": "ls"}', 2)]


def test_assistant_messages_carry_content_or_tool_calls_as_the_wire_wants() -> None:
    assert assistant_message("hi") == {"role": "assistant", "content": "hi"}
    assert assistant_message(None) == {"role": "assistant", "content": ""}  # content is required without calls
    with_calls = assistant_message(None, CALLS[:1])
    assert with_calls == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "x"}'}}]}
    assert assistant_message(None, refusal="I can't.") == {"role": "assistant", "content": "I can't.",
                                                           "refusal": "I can't."}
    assert ToolResult("", "run_shell", "out", index=1).to_message() == tool_message("", "out", "ok")
    # a call's outcome is stored with its tool message (crow's record, never sent): ACP's replay and the resume
    # view read it instead of guessing from an "Error:" prefix
    assert ToolResult("", "run_shell", "Error: no", ok=False).to_message()["crow_outcome"] == "error"  # type: ignore[typeddict-item]
    assert outcome_of(tool_message("", "Error: old session")) == "error"
    assert outcome_of(tool_message("", "Error: a file's text", "ok")) == "ok"


def test_pending_calls_are_matched_by_position_since_ids_repeat_or_are_empty() -> None:
    history = [user_message("go"), assistant_message(None, CALLS), tool_message("call_a", "x"),
               tool_message("", "y")]
    assert pending_tool_calls(history) == [CALLS[2].to_wire()]
    assert pending_tool_calls([*history, tool_message("", "z")]) == []
    assert pending_tool_calls([*history, user_message("next")]) == []  # a later user turn: nothing pending


def test_repair_answers_every_pending_call_once_in_call_order() -> None:
    history = [user_message("go"), assistant_message(None, CALLS), tool_message("call_a", "x")]
    added = repair_history(history, "interrupted")
    assert added == [tool_message("", "Error: the tool call was interrupted; no result.", "cancelled")] * 2
    assert history[-2:] == added and pending_tool_calls(history) == []
    assert repair_history(history) == []  # a valid history is left alone


def test_tool_calls_of_reads_an_assistant_message_and_nothing_else() -> None:
    assert tool_calls_of(assistant_message(None, CALLS[:1])) == [CALLS[0].to_wire()]
    assert tool_calls_of({"role": "assistant", "content": "x", "tool_calls": None}) == []  # a null in a store
    assert tool_calls_of(assistant_message("hi")) == tool_calls_of(user_message("hi")) == []


def test_keys_a_server_attached_stay_on_the_message_and_are_reached_through_as_json() -> None:
    # The messages are typed, yet what a server attached goes back unchanged
    call = ToolCall("c1", "read_file", "{}", extra={"extra_content": {"google": {"thought_signature": "s"}}},
                    function_extra={"strict": True, "name": "not this"})
    message = AssistantTurn(None, tool_calls=[call], fields={"reasoning_content": "why", "content": "not this"},
                            finish_reason="tool_calls").to_message()
    assert message == {"role": "assistant", "content": None, "reasoning_content": "why", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}", "strict": True},
         "extra_content": {"google": {"thought_signature": "s"}}}]}
    assert as_json(message) is message and as_json(message)["reasoning_content"] == "why"


def test_content_text_is_the_string_or_the_text_parts() -> None:
    assert content_text("hi") == "hi" and content_text(None) == ""
    assert content_text([{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "data:x"}},
                         {"type": "text", "text": "b"}]) == "ab"


# Text / thinking / text content joins on resume, ACP replay and export as the live view streamed it (no
# line break the live view did not show)
def test_text_parts_around_thinking_join_as_they_streamed() -> None:
    parts = [{"type": "text", "text": "The answer "}, {"type": "thinking", "thinking": "check it"},
             {"type": "text", "text": "is 4."}]
    assert content_text(parts) == "The answer is 4."


# a Mistral turn whose thinking came as content parts goes back without an invented `reasoning_content`
# beside the parts (a field Mistral never sent; its API refuses extra inputs)
def test_a_turn_whose_reasoning_is_in_its_content_parts_gets_no_reasoning_field() -> None:
    parts = [{"type": "thinking", "thinking": [{"type": "text", "text": "t"}]}, {"type": "text", "text": "a"}]
    message = as_json(AssistantTurn(content="a", reasoning="t", parts=parts).to_message())
    assert message == {"role": "assistant", "content": parts}
    assert as_json(AssistantTurn(content="a", reasoning="t").to_message())["reasoning_content"] == "t"
