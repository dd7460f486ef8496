"""wire/textcalls.py: tool calls a server's parser left in a turn's text.

Properties guarded here:
- every known format is read when the text is an optional plain lead-in and then complete blocks naming
  offered tools with an object of arguments; the lead-in is the turn's content, the blocks are kept raw;
- nothing is read from a block followed by more text, inside a code fence, quoted, or naming a tool not
  offered, nor from text that only mentions the format.
"""

from __future__ import annotations

import json

import pytest

from crow_cli.wire.textcalls import recover_calls

OFFERED = {"read_file", "run_shell"}
READ = '{"name": "read_file", "arguments": {"path": "a.py"}}'
SHELL = '{"name": "run_shell", "arguments": "{\\"command\\": \\"ls\\"}"}'


@pytest.mark.parametrize(("text", "fmt", "names"), [
    (f"I'll check that.\n<tool_call>\n{READ}\n</tool_call>", "hermes", ["read_file"]),
    (f"<tool_call>{READ}</tool_call>\n<tool_call>{SHELL}</tool_call>", "hermes", ["read_file", "run_shell"]),
    (f"[TOOL_CALLS][{READ}, {SHELL}]", "mistral", ["read_file", "run_shell"]),
    ('[TOOL_CALLS]read_file[ARGS]{"path": "a.py"}', "mistral", ["read_file"]),
    ('<|python_tag|>{"name": "read_file", "parameters": {"path": "a.py"}}<|eom_id|>', "llama3", ["read_file"]),
    (f'<|python_tag|>{READ}; {SHELL}', "llama3", ["read_file", "run_shell"]),
    ('<|channel|>analysis<|message|>Read it.<|end|><|start|>assistant<|channel|>commentary to=functions.read_file'
     ' <|constrain|>json<|message|>{"path": "a.py"}<|call|>', "harmony", ["read_file"]),
    ('<|channel|>commentary to=functions.read_filejson<|message|>{"path": "a.py"}', "harmony", ["read_file"]),
    (f"Let me look.\n{READ}", "json", ["read_file"]),
    (f"{READ}\n{SHELL}", "json", ["read_file", "run_shell"]),
    (f"[{READ}, {SHELL}]", "json", ["read_file", "run_shell"]),
])
def test_each_known_format_is_read(text: str, fmt: str, names: list[str]) -> None:
    found = recover_calls(text, OFFERED)
    assert found is not None and found.format == fmt
    assert [name for name, _ in found.calls] == names
    assert all(isinstance(json.loads(arguments), dict) for _, arguments in found.calls)
    assert found.raw and found.raw in text and text.startswith(found.lead_in)


@pytest.mark.parametrize(("text", "lead_in"), [
    (f"I'll check that order. <tool_call>{READ}</tool_call>", "I'll check that order."),
    (f"Let me read it: [TOOL_CALLS][{READ}]", "Let me read it:"),
    ('Reading it now. <|python_tag|>{"name": "read_file", "parameters": {"path": "a.py"}}', "Reading it now."),
])
def test_a_lead_in_on_the_blocks_line_is_a_lead_in_not_an_indent(text: str, lead_in: str) -> None:
    # a lead-in of four characters or more on the same line as the block is a lead-in, not the indent of a
    # Markdown code block, so the call is recovered ("Ok <tool_call>" runs)
    found = recover_calls(text, OFFERED)
    assert found is not None and found.lead_in == lead_in and found.calls[0][0] == "read_file"


@pytest.mark.parametrize("thinking", ["I should call it.", "Plan: read it, then run `ls` with {\"a\": 1}.",
                                      "A long thought. " * 40])
def test_reasoning_in_think_tags_before_the_blocks_is_set_aside(thinking: str) -> None:
    # a Qwen3 / R1 model's <think> block left in the content is set aside, not read as the lead-in: reasoning
    # with braces or backticks, or over MAX_LEAD_IN, does not keep the call as text
    text = f"<think>\n{thinking}\n</think>\n\nI'll read it.\n<tool_call>{READ}</tool_call>"
    found = recover_calls(text, OFFERED)
    assert found is not None and found.calls[0][0] == "read_file"
    assert found.lead_in == text[: text.index("<tool_call>")].strip()  # the content keeps its reasoning


def test_the_lead_in_is_the_content_and_the_arguments_are_json_text() -> None:
    found = recover_calls(f"I'll check that order.\n<tool_call>\n{READ}\n</tool_call>\n", OFFERED)
    assert found is not None and found.lead_in == "I'll check that order."
    assert found.calls == (("read_file", '{"path": "a.py"}'),)


@pytest.mark.parametrize("text", [
    f"<tool_call>{READ}</tool_call> and then I will fix it.",
    f"```\n<tool_call>{READ}</tool_call>\n```",
    f"```json\n{READ}\n```",
    f"Use `<tool_call>` like: <tool_call>{READ}</tool_call>",
    f"The format is {READ}",
    f"Here: `{READ}`",
    f"Example:\n\n    <tool_call>{READ}</tool_call>",
    f"Example:\n\t{READ}",
    '<tool_call>{"name": "delete_everything", "arguments": {}}</tool_call>',
    '<tool_call>{"name": "read_file", "arguments": [1]}</tool_call>',
    f"<tool_call>{READ}</tool_call> between <tool_call>{SHELL}</tool_call>",
    "x" * 500 + f"\n<tool_call>{READ}</tool_call>",
    '{"name": "Alice", "age": 3}',
    "[1, 2, 3]",
    "",
])
def test_text_that_only_shows_markup_is_never_read_as_calls(text: str) -> None:
    assert recover_calls(text, OFFERED) is None


def test_a_written_name_maps_to_the_offered_one() -> None:
    found = recover_calls('<tool_call>{"name": "Read_File", "arguments": {}}</tool_call>', OFFERED,
                          lambda name: name.lower())
    assert found is not None and found.calls == (("read_file", "{}"),)
