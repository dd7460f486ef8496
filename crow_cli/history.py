"""Conversation history in the Chat Completions wire shape, and the types that fill it.

History is a list of wire messages (`Message`: plain dicts, typed), so what is persisted is exactly
what is sent:

    [system?, user, assistant(tool_calls), tool × N (call order), user(tool images)?, assistant, user, …]

Chat Completions tool messages carry text only: the images a turn's tools returned follow all N tool
messages in one user message (`images.tool_images_message`; `is_prompt` tells it from a prompt). Tool-call ids
are carried exactly as the model sent them (`""` when it sent none): see
`../shared/reference/streaming-tool-calls.md` §0 and §3. Keys servers attach beyond the types are kept and
reached through `as_json` alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NotRequired, TypedDict, cast

from .images import Image, attached_line, describe_part, image_name, is_tool_images
from .modes import is_mode_note
from .todos import TodoItem

__all__ = [
    "AUTHOR_KEY",
    "OUTCOMES",
    "OUTCOME_KEY",
    "REASONING_ITEMS_KEY",
    "RECOVERED_KEY",
    "RESPONSE_ID_KEY",
    "AssistantMessage",
    "AssistantTurn",
    "ContentPart",
    "FunctionCall",
    "Message",
    "Outcome",
    "SystemMessage",
    "ToolCall",
    "ToolDisplay",
    "ToolMessage",
    "ToolResult",
    "UserMessage",
    "WireToolCall",
    "as_json",
    "assistant_message",
    "author_of",
    "content_text",
    "is_prompt",
    "message_problem",
    "outcome_of",
    "pending_tool_calls",
    "repair_history",
    "thinking_of",
    "tool_calls_of",
    "tool_message",
    "user_message",
]

ContentPart = dict[str, Any]
"""One part of a content list: `{"type": "text", "text": …}`, `{"type": "image_url", "image_url": {"url": …}}`."""


class FunctionCall(TypedDict):
    """`tool_calls[].function`: what the model called, arguments as JSON text."""

    name: str
    arguments: str


class WireToolCall(TypedDict):
    """One `tool_calls[]` entry of an assistant message; `id` is the model's own (`""` when it sent none)."""

    id: str
    type: Literal["function"]
    function: FunctionCall


class SystemMessage(TypedDict):
    role: Literal["system", "developer"]
    content: str | list[ContentPart]


class UserMessage(TypedDict):
    role: Literal["user"]
    content: str | list[ContentPart]
    """Text, or parts (text and images: `attachments`)."""


class AssistantMessage(TypedDict):
    """A model turn: `content` is None only beside `tool_calls`; reasoning fields are the server's own."""

    role: Literal["assistant"]
    content: str | list[ContentPart] | None
    tool_calls: NotRequired[list[WireToolCall]]
    refusal: NotRequired[str]
    """OpenAI's refusal text (then also the content, when there is none)."""


class ToolMessage(TypedDict):
    """The result of the tool call whose `id` is `tool_call_id`, in call order after its assistant message."""

    role: Literal["tool"]
    tool_call_id: str
    content: str | list[ContentPart]
    name: NotRequired[str]
    """The function name, for servers that demand it (`wire.outgoing`)."""
    crow_outcome: NotRequired[str]
    """How the call ended (`OUTCOME_KEY`: one of `OUTCOMES`); crow's own record, never sent."""


Message = SystemMessage | UserMessage | AssistantMessage | ToolMessage
"""One wire message; tell them apart by `message["role"]` (mypy narrows on it)."""


def as_json(item: Message | WireToolCall | FunctionCall) -> dict[str, Any]:
    """`item` itself (not a copy) as the JSON object it is: the one way to keys a server attached beyond
    its type (`reasoning_content`, `extra_content` …) and to handle messages key by key (`wire.outgoing`).

    A change made through it is a change of `item`; the typed keys keep their types only if it keeps them.

    The `TypedDict`s name the keys crow reads and writes (OpenAI Chat Completions, `messages[]`). Servers
    attach more under their own names (`reasoning_content`, `reasoning`, `reasoning_details` on assistant
    messages, `extra_content` on a tool call …) and get them back unchanged, so a message may hold keys its
    type does not list; this is the one door to them (PEP 728's `extra_items=Any` would say so in the types;
    mypy does not support it yet).
    """
    return cast(dict[str, Any], item)


AUTHOR_KEY = "crow_author"
RECOVERED_KEY = "crow_recovered"
"""An assistant message's record of the text its tool calls were recovered from (`wire.textcalls`):
`{"format": …, "text": …}`, stored with the session, never sent (the calls go as `tool_calls`)."""
REASONING_ITEMS_KEY = "crow_reasoning_items"
"""An assistant message's Responses API reasoning items (`wire.responses`): `[{"type": "reasoning", "id", "summary",
"encrypted_content"}]` as the server returned them, stored with the session, sent back (as input items) only to
the message's own author over the Responses wire, never on the chat wire."""
RESPONSE_ID_KEY = "crow_response_id"
"""An assistant message's Responses API response id, kept when the server stores responses (`store: true`): the
next request to the same author sends it as `previous_response_id` with only the items after it. Never sent
on the chat wire."""
OUTCOME_KEY = "crow_outcome"
"""A tool message's record of how its call ended (`Outcome`): crow's own, stored with the session, never sent."""
"""The key of an assistant message that records who wrote it: `{"base_url": PUBLIC_URL, "model": M}` (the base
URL without credentials or query, `text.public_url`). Stored with the message in the session, never sent on the
wire (`wire.outgoing` drops it): it tells the outgoing copy whether what the message carries (signed thinking,
encrypted reasoning, per-call signatures) is the reader's own."""


def author_of(message: Message) -> dict[str, str] | None:
    """Who wrote an assistant message (`AUTHOR_KEY`), or None when it is not recorded (an older session, a
    message of another role, a damaged value)."""
    author = as_json(message).get(AUTHOR_KEY)
    if isinstance(author, dict) and isinstance(author.get("base_url"), str) and isinstance(author.get("model"), str):
        return {"base_url": author["base_url"], "model": author["model"]}
    return None


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One assembled tool call, as the model asked for it."""

    id: str
    """The model's id, unchanged; `""` when the provider sent none. Never invented."""
    name: str
    """The function name (`""` when the provider sent none: dispatch reports an unknown tool)."""
    arguments: str
    """A JSON text, already repaired when the stream truncated it (`"{}"` when nothing usable came)."""
    index: int = 0
    """Position in call order within its turn (0-based)."""
    cut_off: bool = False
    """The stream cut the arguments off mid-value and the repair had to guess (`wire.repair`): dispatch
    does not run the call, its result asks for it again. Never sent on the wire (`to_wire`)."""
    extra: Mapping[str, Any] | None = None
    """Keys the server attached to the call beside id/type/function (Gemini via Vertex: `extra_content`
    holding a thought signature), sent back on the call exactly; never invented."""
    function_extra: Mapping[str, Any] | None = None
    """Keys the server attached inside `function` beside name/arguments, sent back the same way."""
    custom: bool = False
    """The server sent a `type: "custom"` call (OpenAI's freeform tools, `custom: {name, input}`), which crow
    never offers: it is answered without running (`arguments` holds `{"input": …}`) and goes back in the
    function shape every server reads, its id unchanged. Never sent on the wire as a key."""

    def to_wire(self) -> WireToolCall:
        """The `tool_calls[]` entry of the assistant message (OpenAI Chat Completions shape), with the
        keys the server attached to it (`extra`, `function_extra`)."""
        function: FunctionCall = {"name": self.name, "arguments": self.arguments}
        if self.function_extra:
            _attach(as_json(function), self.function_extra)
        wire: WireToolCall = {"id": self.id, "type": "function", "function": function}
        if self.extra:
            _attach(as_json(wire), self.extra)
        return wire


Outcome = Literal["ok", "error", "denied", "timeout", "cancelled", "unknown_tool"]
OUTCOMES: tuple[Outcome, ...] = ("ok", "error", "denied", "timeout", "cancelled", "unknown_tool")
"""How a tool call ended: it returned; it failed (an exception, a command exiting non-zero, bad or cut-off
arguments); approval or the sandbox refused it; it ran out of time; it was cancelled; no tool has its name."""


@dataclass(frozen=True, slots=True)
class ToolDisplay:
    """What the person is shown of a finished call beside its status line, as data the tool made (surfaces
    never read it out of `ToolResult.output`, which is the model's). Never sent to the model; secrets masked
    by dispatch as in the output."""

    output: str | None = None
    """A command's output (stdout and stderr merged) as the tool kept it; surfaces show its first and last lines."""
    exit_code: int | None = None
    """A command's exit code; None when it did not exit by itself (timed out, killed: `status` says)."""
    status: str | None = None
    """How a command ended, in words: `exit code 1`, `killed by signal 9`, `timed out after 5 s; …`."""
    lines: int | None = None
    """How many lines the command printed in all; `output` may hold only their head and tail (None: as many
    as `output` holds)."""
    diff: str | None = None
    """The unified diff (`--- a/PATH` / `+++ b/PATH`) of the change the call made to a file."""
    todos: tuple[TodoItem, ...] | None = None
    """The todo list a `todo_write` call wrote (the whole list), shown as a checklist."""


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The outcome of one tool call; exactly one exists for every `ToolCall`."""

    call_id: str
    """Equal to `ToolCall.id`, so the wire `tool_call_id` links back to the call."""
    name: str
    output: str
    """What the model sees: the tool's text, or a sentence saying what went wrong."""
    ok: bool = True
    duration_s: float = 0.0
    """Wall-clock seconds the tool ran (0 when it never started)."""
    index: int = 0
    """The call's position in its turn (`ToolCall.index`): ids may repeat or be `""`."""
    outcome: Outcome = "ok"
    """How the call ended (`OUTCOMES`): surfaces read this, never the output text. `ok` when the tool
    returned (`ok` is True exactly then; a result made with `ok=False` and no outcome is an `error`)."""
    display: ToolDisplay | None = None
    """What the person is shown of the call beyond its status line (a command's output, an edit's diff);
    None when the tool gave nothing to show."""
    images: tuple[Image, ...] = ()
    """Images the tool returned (a plugin's `Image`, an MCP image block). `output` names each with a
    placeholder; the loop shows them to the model in a user message after the turn's tool messages."""

    def __post_init__(self) -> None:
        if not self.ok and self.outcome == "ok":
            object.__setattr__(self, "outcome", "error")

    def to_message(self) -> ToolMessage:
        """The `role: "tool"` message, with its outcome recorded (`OUTCOME_KEY`, never sent)."""
        return tool_message(self.call_id, self.output, self.outcome)


@dataclass(slots=True)
class AssistantTurn:
    """One streamed model turn, assembled."""

    content: str | None = None
    """The visible text, or None when the model sent none."""
    reasoning: str | None = None
    """The reasoning text as shown from `reasoning_content`, `reasoning` or reasoning blocks (a leading
    `<think>` block stays in `content`); what is kept for the server is in `fields`."""
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str = "stop"
    """The server's finish_reason; `tool_calls` whenever calls were assembled, whatever it said."""
    usage: dict[str, Any] | None = None
    """The last `usage` object the server sent (token counts), when it sent one."""
    timings: dict[str, Any] | None = None
    """The last `timings` object the server sent beside it (llama.cpp: `prompt_n`, `cache_n`, `predicted_n`
    tokens and their milliseconds), when it sent one."""
    refusal: str | None = None
    """The model's refusal text (OpenAI `delta.refusal`), or None when it did not refuse."""
    fields: dict[str, Any] = field(default_factory=dict)
    """Everything else the server attached to the message, under the server's names, to be sent back
    exactly: reasoning text per field name (`reasoning_content`, `reasoning`), `reasoning_details`
    blocks as merged, and any other key a delta carried (first non-empty value)."""
    rules: list[str] = field(default_factory=list)
    """The accumulator rules that fired while assembling the turn, in first-firing order (`finish-missing`:
    the stream ended without a finish_reason, EOF or a bare `[DONE]`)."""
    parts: list[ContentPart] | None = None
    """The content as the server sent it in typed parts, when it sent a part other than text (Mistral's
    `thinking` chunks): the message's `content` goes back as these parts; `content` keeps the text."""

    @property
    def is_tool_turn(self) -> bool:
        return bool(self.tool_calls)

    def to_message(self) -> AssistantMessage:
        """The assistant wire message: content (None only beside tool calls) plus `tool_calls` when any,
        then every field the server attached (`fields`), whatever kind of turn it is.

        A refusal is kept as OpenAI's assistant-message `refusal` field, and stands in as `content`
        when there is none (content is required without tool_calls; other servers ignore `refusal`).
        Which of the kept fields go back on a request is the client's decision (`wire.outgoing`).
        """
        message = assistant_message(self.content, self.tool_calls, refusal=self.refusal)
        if self.parts is not None:
            message["content"] = self.parts
        if self.fields:
            _attach(as_json(message), self.fields)
        elif self.reasoning and self.parts is None:  # reasoning in the parts is already there, as sent
            as_json(message)["reasoning_content"] = self.reasoning  # a turn built by hand
        return message


def user_message(text: str) -> UserMessage:
    return {"role": "user", "content": text}


def assistant_message(content: str | None, tool_calls: list[ToolCall] | None = None, *,
                      refusal: str | None = None) -> AssistantMessage:
    """An assistant wire message; a `refusal` (OpenAI) is kept in its own field and as content when there is none.

    `content` is None only beside tool calls: without them it is required, so an empty answer is `""`.
    """
    msg: AssistantMessage = {"role": "assistant", "content": content or refusal or (None if tool_calls else "")}
    if refusal:
        msg["refusal"] = refusal
    if tool_calls:
        msg["tool_calls"] = [c.to_wire() for c in tool_calls]
    return msg


def tool_message(tool_call_id: str, content: str, outcome: Outcome | None = None) -> ToolMessage:
    """A `role: "tool"` message; `outcome` (how the call ended) is recorded under `OUTCOME_KEY` when given."""
    message: ToolMessage = {"role": "tool", "tool_call_id": tool_call_id, "content": content}
    if outcome is not None:
        message[OUTCOME_KEY] = outcome  # type: ignore[literal-required]
    return message


def outcome_of(message: Message) -> Outcome:
    """How the call a tool message answers ended: its recorded `OUTCOME_KEY`; for a message stored before
    outcomes were (an older session), `error` when its text is one of crow's error texts, else `ok`."""
    recorded = as_json(message).get(OUTCOME_KEY)
    if recorded in OUTCOMES:
        return cast(Outcome, recorded)
    return "error" if content_text(message.get("content")).startswith("Error:") else "ok"


def content_text(content: str | list[ContentPart] | None, *, images: bool = False) -> str:
    """The text of a message's `content`: the string, or its text parts joined as they streamed (nothing between
    them: text / thinking / text reads as the live view showed it); an image or other part has none (with
    `images`, an image part is its `[image: NAME, SIZE]` line, in place of the prompt's line naming the
    attached image, `images.attached_line`, when the text has it); `""` for None."""
    if isinstance(content, list):
        pieces: list[str] = []
        for p in content:
            if not isinstance(p, dict):
                continue
            if p.get("type") == "text":
                pieces.append(str(p.get("text", "")))
            elif images and p.get("type") == "image_url":
                named = attached_line(name) if (name := image_name(p)) else ""
                if named and named in (text := "".join(pieces)):  # the image where the prompt names it, once
                    pieces = [text.replace(named, describe_part(p), 1)]
                    continue
                pieces.append(f"{chr(10) if pieces and not pieces[-1].endswith(chr(10)) else ''}{describe_part(p)}\n")
        return "".join(pieces).rstrip("\n") if images else "".join(pieces)
    return content or ""


def is_prompt(message: Message | dict[str, Any]) -> bool:
    """Whether `message` is a user's prompt: a user message other than the one the loop appends to show the
    model the images a turn's tools returned (`images.tool_images_message`), which belongs to that turn, and
    a note that the approval mode changed (`modes.mode_note`)."""
    return message.get("role") == "user" and not is_tool_images(message) and not is_mode_note(message)


def thinking_of(part: Any) -> str | None:
    """The reasoning text of a content part of type `thinking` (Mistral: `{"type": "thinking", "thinking":
    [{"type": "text", "text": …}]}`, or the text as a string), `""` when it has none; None for any other part."""
    if not isinstance(part, Mapping) or part.get("type") != "thinking":
        return None
    inner = part.get("thinking")
    if isinstance(inner, list):
        return "".join(p["text"] for p in inner if isinstance(p, Mapping) and isinstance(p.get("text"), str))
    return inner if isinstance(inner, str) else ""


def tool_calls_of(message: Message) -> list[WireToolCall]:
    """The `tool_calls[]` of an assistant message; `[]` for one without (absent or null) and other roles."""
    return (message.get("tool_calls") or []) if message["role"] == "assistant" else []


def pending_tool_calls(messages: list[Message]) -> list[WireToolCall]:
    """The `tool_calls[]` entries of the last assistant message that have no tool result after it.

    Results are matched by position (call order), since `""` ids may repeat.
    """
    for i in range(len(messages) - 1, -1, -1):
        msg = messages[i]
        if msg["role"] == "assistant":
            answered = sum(1 for m in messages[i + 1 :] if m["role"] == "tool")
            return tool_calls_of(msg)[answered:]
        if msg["role"] == "user":
            return []
    return []


def repair_history(messages: list[Message], reason: str = "interrupted") -> list[ToolMessage]:
    """Append a tool result for every tool call of the last assistant turn that lacks one.

    Each gets one saying the call was `reason`, in call order, one per call. Mutates `messages` in place
    and returns the appended messages, so a history cut by a crash (a stored session the process never
    closed) is valid again before it is sent anywhere. The loop closes its own history when stopped.
    """
    added = [tool_message(call.get("id") or "", f"Error: the tool call was {reason}; no result.", "cancelled")
             for call in pending_tool_calls(messages)]
    messages.extend(added)
    return added


def _attach(wire: dict[str, Any], attached: Mapping[str, Any]) -> None:
    """Add the keys a server attached, under its names; a key crow sets itself keeps crow's value."""
    wire.update((k, v) for k, v in attached.items() if k not in wire)


_ROLES = ("system", "developer", "user", "assistant", "tool")


def _kind(value: Any) -> str:
    names = {str: "a string", bool: "a boolean", int: "a number", float: "a number", list: "a list",
             dict: "an object", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def message_problem(message: Any) -> str | None:
    """What makes a stored row no Chat Completions message (one phrase), or None when it is one.

    A message is an object with a `role` among system, developer, user, assistant and tool; `content`
    null, a string or a list of objects; an assistant's `tool_calls` a list of objects whose `function`
    has a string `name` and string `arguments`; a tool result's `tool_call_id` a string.
    """
    if not isinstance(message, dict):
        return f"it is {_kind(message)}, not a message object"
    role = message.get("role")
    if role not in _ROLES:
        return "it has no role" if role is None else f"its role is {role!r}"
    content = message.get("content")
    if content is not None and not isinstance(content, str) and not (
            isinstance(content, list) and all(isinstance(p, dict) for p in content)):
        return f"its content is {_kind(content)}"
    calls = message.get("tool_calls")
    if calls is not None:
        if role != "assistant" or not isinstance(calls, list):
            return f"its tool_calls is {_kind(calls)}" if role == "assistant" else f"a {role} message has tool_calls"
        for n, call in enumerate(calls):
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict):
                return f"its tool_calls[{n}] has no function object"
            for key in ("name", "arguments"):
                if not isinstance(function.get(key), str):
                    return f"its tool_calls[{n}].function.{key} is {_kind(function.get(key))}, not a string"
            if not isinstance(call.get("id", ""), str):
                return f"its tool_calls[{n}].id is {_kind(call.get('id'))}"
    if role == "tool" and not isinstance(message.get("tool_call_id"), str):
        return f"its tool_call_id is {_kind(message.get('tool_call_id'))}"
    return None
