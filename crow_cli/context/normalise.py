"""The outgoing history is always valid: `normalise` makes the copy that is sent.

Chat templates that require alternating roles (Mistral, Gemma on vLLM) and strict servers (OpenAI)
refuse a history that a failed turn, a killed process or an older crow left behind. Before every
request the loop sends `normalise(history)`; the stored history is never changed by it. `Normaliser`
keeps what it made of the messages it has seen, so a growing conversation costs linear work.
"""

from __future__ import annotations

import operator
from typing import Any

from ..history import ContentPart, Message, UserMessage, WireToolCall, tool_message

__all__ = ["INTERRUPTED_OUTPUT", "Normaliser", "normalise"]

INTERRUPTED_OUTPUT = "Error: the tool call was interrupted; no result."
"""The result sent for a call that has none (the one `history.repair_history` stores for "interrupted")."""


def normalise(history: list[Message]) -> list[Message]:
    """A valid copy of `history` to send.

    The rules, applied in one pass:

    * a tool result is sent only right after the assistant message holding its call (matched by
      position, since ids may repeat or be `""`); a result without its call is dropped;
    * an assistant tool call without a result gets one saying it was interrupted (the same sentence
      `history.repair_history` stores), so no call is ever sent unanswered;
    * an assistant message with neither content (nor refusal) nor tool calls is dropped;
    * two user messages in a row are **merged** into one, their texts joined by a blank line (content
      parts lists are concatenated). A turn that failed left its user message behind without an
      answer: merging sends it together with the next one, so nothing the user typed is lost, and the
      model sees both as one request. (Dropping it would silently forget what the user asked.)

    Messages are not copied unless changed (merged user messages are new dicts); `history` itself
    is never modified. Linear in the number of messages.
    """
    return Normaliser()(history)


class Normaliser:
    """`normalise` for a history that grows at its end, working only on what was appended since the last call.

    A call whose history does not start with the very messages (by identity) of the last call's
    starts over; messages are never changed in place once appended (the loop only appends), so the
    kept result stays right. Each call still compares the known messages by identity and copies the
    result list (both at C speed), and returns a new list the caller may change.
    """

    def __init__(self) -> None:
        self._seen: list[Message] = []  # the messages handled so far, kept alive so identities stay unique
        self._out: list[Message] = []  # their normalised form, before the answers of `_pending`
        self._pending: list[WireToolCall] = []  # calls of the last assistant message still without a result

    def __call__(self, history: list[Message]) -> list[Message]:
        """The normalised copy of `history` (see `normalise`)."""
        known = len(self._seen)
        if len(history) < known or not all(map(operator.is_, history, self._seen)):
            self._seen, self._out, self._pending = [], [], []
            known = 0
        out, pending = self._out, self._pending
        for message in history[known:]:
            if message["role"] == "tool":
                if pending:
                    pending.pop(0)
                    out.append(message)
                continue  # a result without its call
            _answer(out, pending)
            if message["role"] == "assistant":
                calls = message.get("tool_calls") or []
                if not calls and not _has_text(message.get("content")) and not message.get("refusal"):
                    continue
                pending.extend(calls)
                out.append(message)
            elif message["role"] == "user" and out and (last := out[-1])["role"] == "user":
                out[-1] = _merge(last, message)
            else:
                out.append(message)
        self._seen.extend(history[known:])
        result = list(out)
        _answer(result, list(pending))
        return result


def _answer(out: list[Message], pending: list[WireToolCall]) -> None:
    """Give every call in `pending` an "interrupted" result (in call order), and empty it."""
    for call in pending:
        out.append(tool_message(str(call.get("id") or ""), INTERRUPTED_OUTPUT, "cancelled"))
    pending.clear()


def _has_text(content: Any) -> bool:
    if isinstance(content, list):
        return bool(content)
    return isinstance(content, str) and bool(content.strip())


def _merge(first: UserMessage, second: UserMessage) -> UserMessage:
    a, b = first.get("content"), second.get("content")
    content: str | list[ContentPart]
    if isinstance(a, list) or isinstance(b, list):
        content = _parts(a) + _parts(b)
    else:
        content = "\n\n".join(t for t in (str(a or ""), str(b or "")) if t)
    return {**first, "content": content}


def _parts(content: Any) -> list[ContentPart]:
    if isinstance(content, list):
        return list(content)
    return [{"type": "text", "text": str(content)}] if content else []
