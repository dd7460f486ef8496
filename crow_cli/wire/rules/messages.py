"""Message rules: the shape of the request's messages changed where a server refuses it as sent.

Content beside tool calls (null or ""), blank tool results, thinking parts a server takes no part of, a role
its chat template refuses, tool results over its string limit. Each rule changes one message at a time
(`apply` over the list) but `FoldRole`; its docstring names the server wording it answers (`wire.wording`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

from ...history import thinking_of
from ...text import truncate_output
from ..profiles import REASONING_FIELDS
from .base import Rule, is_size, with_items

__all__ = ["CUT_MARGIN", "NO_OUTPUT", "AssistantContentText", "AssistantToolContent", "CutToolResult", "FoldRole",
           "MessageRule", "ToolContentBesideReasoning", "ToolResultPlaceholder", "blank", "has_thinking"]

NO_OUTPUT = "(no output)"
"""The text a blank tool result is sent as, for servers that refuse an empty one."""
CUT_MARGIN = 200
"""Characters kept free below a server's string limit for the cut marker (`text.truncate_output`)."""


@dataclass(frozen=True)
class MessageRule(Rule):
    """A message-shape rule: changes each message it applies to, one at a time."""

    def message(self, message: dict[str, Any]) -> dict[str, Any]:
        """One message as sent under this rule (itself when unchanged)."""
        raise NotImplementedError

    def apply(self, request: dict[str, Any]) -> dict[str, Any]:
        messages = request.get("messages")
        if not isinstance(messages, list):
            return request
        return with_items(request, "messages", messages,
                          [self.message(m) if isinstance(m, dict) else m for m in messages])


@dataclass(frozen=True)
class AssistantToolContent(MessageRule):
    """Send the blank `content` of assistant messages with tool calls as `value` (`""` for Ollama's "invalid
    message content type: <nil>", None for Anthropic-compatible "text content blocks must be non-empty")."""

    op: ClassVar[str] = "assistant_tool_content"
    value: Any

    def message(self, message: dict[str, Any]) -> dict[str, Any]:
        if message.get("role") == "assistant" and message.get("tool_calls") and blank(message.get("content")) \
                and message.get("content") != self.value:
            return {**message, "content": self.value}
        return message

    def describe(self, before: Any = None) -> str:
        return f"sent content {json.dumps(self.value)} on assistant messages with tool calls"


@dataclass(frozen=True)
class ToolContentBesideReasoning(MessageRule):
    """Send `content` as null on assistant messages with tool calls that carry reasoning text: gpt-oss's chat
    template on llama.cpp takes one or the other ("Cannot pass both content and thinking in an assistant
    message with tool calls!", a 500: openclaw/openclaw#6514)."""

    op: ClassVar[str] = "tool_content_beside_reasoning"

    def message(self, message: dict[str, Any]) -> dict[str, Any]:
        if message.get("role") == "assistant" and message.get("tool_calls") and not blank(message.get("content")) \
                and any(isinstance(message.get(f), str) and message[f].strip() for f in REASONING_FIELDS):
            return {**message, "content": None}
        return message

    def describe(self, before: Any = None) -> str:
        return "sent content null on assistant messages with tool calls that carry reasoning"


@dataclass(frozen=True)
class ToolResultPlaceholder(MessageRule):
    """Send blank tool results as `value` (`NO_OUTPUT`) (Anthropic-compatible "text content blocks must be
    non-empty")."""

    op: ClassVar[str] = "tool_result_placeholder"
    value: Any

    def message(self, message: dict[str, Any]) -> dict[str, Any]:
        if message.get("role") == "tool" and blank(message.get("content")):
            return {**message, "content": self.value}
        return message

    def describe(self, before: Any = None) -> str:
        return f"sent blank tool results as {json.dumps(self.value)}"


@dataclass(frozen=True)
class AssistantContentText(MessageRule):
    """Send assistant content with thinking parts as its text (vLLM "Input should be 'text' or 'refusal'")."""

    op: ClassVar[str] = "assistant_content_text"

    def message(self, message: dict[str, Any]) -> dict[str, Any]:
        if message.get("role") == "assistant" and has_thinking(message.get("content")):
            text = _text_of([p for p in message["content"] if thinking_of(p) is None])
            return {**message, "content": text or (None if message.get("tool_calls") else "")}
        return message

    def describe(self, before: Any = None) -> str:
        return "sent the content of assistant messages as text, without its thinking parts"


@dataclass(frozen=True)
class CutToolResult(MessageRule):
    """Cut tool results longer than `value` characters to fit, with the marker of cut output (OpenAI "string too
    long. Expected a string with maximum length N")."""

    op: ClassVar[str] = "cut_tool_result"
    sized: ClassVar[bool] = True
    value: Any

    def apply(self, request: dict[str, Any]) -> dict[str, Any]:
        return super().apply(request) if is_size(self.value) else request

    def message(self, message: dict[str, Any]) -> dict[str, Any]:
        return _cut_tool_result(message, self.value)  # type: ignore[no-any-return]

    def describe(self, before: Any = None) -> str:
        return (f"cut tool results longer than {self.value} characters to fit (the server's limit; "
                "the session keeps them whole)")


@dataclass(frozen=True)
class FoldRole(Rule):
    """Send the messages of role `target` (system, developer) as part of the first user message (a chat template
    that takes no system role: "System role not supported")."""

    op: ClassVar[str] = "fold_role"
    target: str

    def apply(self, request: dict[str, Any]) -> dict[str, Any]:
        messages = request.get("messages")
        if not isinstance(messages, list):
            return request
        return with_items(request, "messages", messages, _fold_role(messages, self.target))

    def describe(self, before: Any = None) -> str:
        return f"sent {self.target} messages as part of the first user message"



def _text_of(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text") or "" for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def _fold_role(messages: list[Any], role: str) -> list[Any]:
    """`messages` without those of `role`, their text put before the first user message's (a template that
    refuses the system role: the instructions still come first); with no user message they become one."""
    folded = [_text_of(m.get("content")) for m in messages if isinstance(m, dict) and m.get("role") == role]
    if not folded:
        return messages
    rest = [m for m in messages if not (isinstance(m, dict) and m.get("role") == role)]
    prefix = "\n\n".join(t for t in folded if t.strip())
    at = next((i for i, m in enumerate(rest) if isinstance(m, dict) and m.get("role") == "user"), None)
    if at is None:
        return [{"role": "user", "content": prefix}, *rest]
    user = rest[at]
    content = user.get("content")
    if isinstance(content, list):
        new: Any = [{"type": "text", "text": prefix}, *content]
    else:
        new = f"{prefix}\n\n{content}" if isinstance(content, str) and content else prefix
    return [*rest[:at], {**user, "content": new}, *rest[at + 1:]]


def _cut(text: Any, limit: int) -> Any:
    """`text` (a string longer than `limit`) cut with the marker of cut output so that all of it fits."""
    if not isinstance(text, str) or len(text) <= limit:
        return text
    return truncate_output(text, limit - CUT_MARGIN if limit > 2 * CUT_MARGIN else limit // 2)


def _cut_tool_result(message: Any, limit: int) -> Any:
    """A tool message whose content (a string, or the text of one of its parts) is longer than `limit`, cut."""
    if not isinstance(message, dict) or message.get("role") != "tool":
        return message
    content = message.get("content")
    if isinstance(content, str) and len(content) > limit:
        return {**message, "content": _cut(content, limit)}
    if isinstance(content, list) and any(isinstance(p, dict) and isinstance(p.get("text"), str)
                                         and len(p["text"]) > limit for p in content):
        return {**message, "content": [{**p, "text": _cut(p["text"], limit)} if isinstance(p, dict)
                                       and isinstance(p.get("text"), str) else p for p in content]}
    return message


def blank(content: Any) -> bool:
    if isinstance(content, str):
        return not content.strip()
    if isinstance(content, list):  # a part other than text (thinking, an image) is content
        return all(isinstance(p, dict) and p.get("type") in ("text", None) and not str(p.get("text") or "").strip()
                   for p in content)
    return content is None


def has_thinking(content: Any) -> bool:
    return isinstance(content, list) and any(thinking_of(part) is not None for part in content)

