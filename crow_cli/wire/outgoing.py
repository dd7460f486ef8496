"""The history as it goes on the wire: what the server attached comes back, minus what it refuses.

The stored history keeps every assistant message with everything its server attached (reasoning text
under the server's field name, `reasoning_details` blocks, per-call keys such as `extra_content`,
any other key). `Outgoing.messages` makes the copy that is sent, one message at a time:

* reasoning (`profiles.REASONING_FIELDS` and `REASONING_BLOCK_FIELDS`) follows `reasoning_echo`: `always`
  sends it as kept, `never` sends none, `auto` sends every assistant message's reasoning for
  exchanges (a user message and what answers it) that used tools, the final answer included, and
  none for exchanges that did not;
* a field the server refused (400/422 naming it as forbidden, unknown or extra) is dropped from every
  message and tool call; a reasoning field it demanded is added to every assistant message (its text
  under another reasoning name, else `""`); tool messages carry the function `name` when the server
  demanded it (Gemini's OpenAI-compatible endpoint) and never when it refused it.

What a refusal taught is applied for the client's life and returned by `Outgoing.learned` as facts
(`wire.facts`), so later runs start with it. Each message's outgoing form depends only on the
message, its exchange and the policy, so it is computed once and kept (per-turn work is proportional
to what the turn added). Pure: no I/O.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping
from typing import Any, Literal, get_args

from ..history import Message, WireToolCall, as_json, thinking_of, tool_calls_of
from .profiles import REASONING_BLOCK_FIELDS, REASONING_FIELDS, field_demanded, field_refused

__all__ = ["REASONING_ECHO", "Adaptation", "Outgoing", "ReasoningEcho"]

_CORE = frozenset(("role", "content", "tool_calls", "tool_call_id"))
"""Message keys never dropped: without them there is no message."""
_CALL_CORE = frozenset(("id", "type", "function"))
_BLOCKS = frozenset(REASONING_BLOCK_FIELDS)
_FUNCTION_CORE = frozenset(("name", "arguments"))

ReasoningEcho = Literal["auto", "always", "never"]
"""`reasoning_echo`: which assistant messages' reasoning goes back (module docstring)."""
REASONING_ECHO: tuple[ReasoningEcho, ...] = get_args(ReasoningEcho)


class Adaptation:
    """One change a refusal taught: what it is (for the notice), the fact it makes, and why (`--debug`)."""

    __slots__ = ("fact", "notice", "why")

    def __init__(self, notice: str, fact: dict[str, Any], why: str = "") -> None:
        self.notice = notice
        self.fact = fact
        self.why = why


class Outgoing:
    """The outgoing form of a history under one server's policy (see the module docstring).

    Args:
        echo: `reasoning_echo`: `auto`, `always` or `never`.
        reasoning_fields: the reasoning text field names.
        known: facts remembered for this server (`wire.facts.recall`): `refused_fields`,
            `required_fields`, `tool_message_name`.
    """

    def __init__(self, echo: ReasoningEcho = "auto", *, reasoning_fields: tuple[str, ...] = REASONING_FIELDS,
                 known: Mapping[str, Any] | None = None) -> None:
        self.echo = echo
        self.reasoning = (*reasoning_fields, *REASONING_BLOCK_FIELDS)
        self._text_fields = reasoning_fields
        self.dropped: list[str] = []
        """Fields refused by the server: sent on no message, tool call or function."""
        self.required: list[str] = []
        """Reasoning fields the server demanded on every assistant message."""
        self.tool_name: bool | None = None
        """True: tool messages carry the function `name`; False: never (refused); None: as stored."""
        known = known or {}
        self.dropped += [f for f in known.get("refused_fields") or () if isinstance(f, str)]
        self.required += [f for f in known.get("required_fields") or () if isinstance(f, str)]
        if isinstance(known.get("tool_message_name"), bool):
            self.tool_name = known["tool_message_name"]
        self._version = 0
        # The last history (kept alive, so identities stay unique) and its outgoing form, message for
        # message, under policy `_seen_version`; where its open (last) exchange starts, whether that
        # exchange used tools, and the tool-message naming state (calls, answered) there and at the end.
        self._seen: list[Message] = []
        self._sent: list[dict[str, Any]] = []
        self._seen_version = 0
        self._open = 0
        self._open_tools = False
        self._open_state: tuple[list[WireToolCall], int] = ([], 0)
        self._state: tuple[list[WireToolCall], int] = ([], 0)

    def learned(self) -> dict[str, Any]:
        """The policy as facts to remember (`wire.facts.learn`)."""
        facts: dict[str, Any] = {"refused_fields": list(self.dropped), "required_fields": list(self.required)}
        if self.tool_name is not None:
            facts["tool_message_name"] = self.tool_name
        return facts

    def messages(self, history: list[Message]) -> list[dict[str, Any]]:
        """`history` as it is sent, JSON objects (copies where changed; the history itself is never modified).

        A history that starts with the very messages (by identity) of the last call's, under the same
        policy, has only what follows shaped, plus its open exchange once more when that exchange has
        just used tools: the work is proportional to what was appended. Anything else starts over.
        """
        known = len(self._seen)
        if (self._seen_version != self._version or len(history) < known
                or not all(map(operator.is_, history, self._seen))):
            self._seen, self._sent, known, self._seen_version = [], [], 0, self._version
            self._open, self._open_tools, self._open_state, self._state = 0, False, ([], 0), ([], 0)
        new = history[known:]
        if not new:
            return list(self._sent)
        cut = next((i for i, m in enumerate(new) if m["role"] == "user"), len(new))
        tools = self._open_tools or any(tool_calls_of(m) for m in new[:cut])
        begin = self._open if tools and not self._open_tools else known  # its earlier messages change form
        calls, answered = self._open_state if begin < known else self._state
        used = [tools] * (known - begin + cut) + _tool_exchanges(new[cut:])
        shaped: list[dict[str, Any]] = []
        for message, tools_used in zip(history[begin:], used, strict=True):
            name = None
            if message["role"] == "user":
                self._open, self._open_state = begin + len(shaped), (calls, answered)
            elif message["role"] == "assistant":
                calls = tool_calls_of(message)
                answered = 0
            elif message["role"] == "tool":
                if answered < len(calls):
                    name = calls[answered]["function"]["name"]
                answered += 1
            shaped.append(self.shape(message, tools_used=tools_used, call_name=name))
        del self._sent[begin:]
        self._sent += shaped
        self._seen += new
        self._open_tools, self._state = used[-1], (calls, answered)
        return list(self._sent)

    def shape(self, message: Message, *, tools_used: bool, call_name: str | None = None) -> dict[str, Any]:
        """One message as sent (itself when unchanged). `tools_used`: its exchange used tools; `call_name`:
        for a tool message, the function name of the call it answers."""
        role = message["role"]
        message_json = as_json(message)  # reasoning and other attached fields are dropped or added by name
        drop = [k for k in self.dropped if k in message and k not in _CORE]
        add: dict[str, Any] = {}
        if role == "assistant":
            if self.echo == "never" or (self.echo == "auto" and not tools_used):
                drop += [k for k in self.reasoning if k in message]
                for key, value in message_json.items():  # blocks held in another field (LiteLLM's
                    if isinstance(value, dict) and not _BLOCKS.isdisjoint(value):  # provider_specific_fields)
                        if rest := {k: v for k, v in value.items() if k not in _BLOCKS}:
                            add[key] = rest
                        else:
                            drop.append(key)
            if self.echo != "never":
                for key in self.required:
                    if key not in message or key in drop:
                        add[key] = next((message_json[k] for k in self._text_fields
                                         if isinstance(message_json.get(k), str)), "")
        elif self.echo != "always":  # reasoning belongs to assistant messages only
            drop += [k for k in self.reasoning if k in message]
        if role == "tool":
            if self.tool_name and "name" not in message and call_name and "name" not in self.dropped:
                add["name"] = call_name
            elif self.tool_name is False and "name" in message:
                drop.append("name")
        calls = tool_calls_of(message)
        new_calls = self._shape_calls(calls) if self.dropped and calls else calls
        content = message_json.get("content")
        if role == "assistant" and isinstance(content, list) and (
                self.echo == "never" or (self.echo == "auto" and not tools_used)) \
                and any(thinking_of(part) is not None for part in content):
            add["content"] = _without_thinking(content, bool(calls))
        if not drop and not add and new_calls is calls:
            return message_json
        out = {k: v for k, v in message_json.items() if k not in drop}
        out.update(add)
        if new_calls is not calls:
            out["tool_calls"] = new_calls
        return out

    def _shape_calls(self, calls: list[WireToolCall]) -> list[WireToolCall] | list[dict[str, Any]]:
        refused = self.dropped
        changed = False
        out = []
        for wire in calls:
            call, fn = as_json(wire), as_json(wire["function"])
            if any(k in call and k not in _CALL_CORE for k in refused):
                call = {k: v for k, v in call.items() if k in _CALL_CORE or k not in refused}
                changed = True
            if any(k in fn and k not in _FUNCTION_CORE for k in refused):
                call = {**call, "function": {k: v for k, v in fn.items() if k in _FUNCTION_CORE or k not in refused}}
                changed = True
            out.append(call)
        return out if changed else calls

    def adapt(self, status: int, text: str, sent: list[dict[str, Any]]) -> Adaptation | None:
        """The change a 400/422 body asks for, applied to the policy; None when it names no field this
        policy can add or drop (or one it changed already).

        A field that was `sent` and is refused is dropped everywhere; a reasoning field (echo `auto`)
        or a tool message's `name` that some message lacks and that is demanded is added everywhere.
        """
        candidates = _sent_fields(sent)
        if self.echo != "auto":  # reasoning goes as the user said
            candidates = [k for k in candidates if k not in self.reasoning]
        refused = field_refused(status, text, [k for k in candidates if k not in self.dropped])
        if refused is not None:
            self.dropped.append(refused)
            self.required = [k for k in self.required if k != refused]
            where = "tool messages" if refused == "name" and self.tool_name else "messages"
            if refused == "name":
                self.tool_name = False
            self._version += 1
            return Adaptation(f"the server refuses {refused} in {where} ({status}); sending the request again "
                              "without it (and without it from now on)", {"refused_fields": list(self.dropped)},
                              f"dropped {refused}: a {status} names it, sent, as forbidden, unknown or extra")
        missing: list[str] = []
        assistants = [m for m in sent if m.get("role") == "assistant"]
        if self.echo == "auto":
            # a field refused before (learned, or from another server at this URL) that is now demanded: the
            # fact was wrong, the demand replaces it
            missing += [k for k in self._text_fields
                        if k not in self.required and any(k not in m for m in assistants)]
        if self.tool_name is not True and "name" not in self.dropped and any(
                m.get("role") == "tool" and not m.get("name") for m in sent):
            missing.append("name")
        demanded = field_demanded(status, text, missing)
        if demanded is None:
            return None
        self._version += 1
        if demanded == "name":
            self.tool_name = True
            return Adaptation(f"the server requires the function name on tool messages ({status}); sending the "
                              "request again with it", {"tool_message_name": True},
                              f"added name to tool messages: a {status} names it as required or missing")
        self.required.append(demanded)
        self.dropped = [k for k in self.dropped if k != demanded]
        return Adaptation(f"the server requires {demanded} on assistant messages ({status}); sending the request "
                          "again with it", {"required_fields": list(self.required),
                                            "refused_fields": list(self.dropped)},
                          f"added {demanded} to every assistant message: a {status} names it as required or missing")

    def describe(self) -> str:
        """The policy in words, for `--debug`."""
        echo = {"auto": "reasoning back for exchanges that used tools", "always": "reasoning back on every message",
                "never": "no reasoning back"}.get(self.echo, self.echo)
        parts = [f"everything the server attached, {echo} (reasoning_echo {self.echo})"]
        if self.dropped:
            parts.append(f"never {', '.join(self.dropped)}")
        if self.required:
            parts.append(f"{', '.join(self.required)} on every assistant message")
        if self.tool_name is not None:
            parts.append("the function name on tool messages" if self.tool_name else "no name on tool messages")
        return "; ".join(parts)


def _tool_exchanges(history: list[Message]) -> list[bool]:
    """For each message, whether its exchange (a user message and what follows up to the next one)
    has an assistant message with tool calls. Linear."""
    used = [False] * len(history)
    start, tools = 0, False
    for i, message in enumerate(history):
        if message["role"] == "user":
            if tools:
                used[start:i] = [True] * (i - start)
            start, tools = i, False
        elif tool_calls_of(message):
            tools = True
    if tools:
        used[start:] = [True] * (len(history) - start)
    return used


def _sent_fields(messages: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every optional key on the messages, their tool calls and functions, in first-seen order."""
    seen: dict[str, None] = {}
    for message in messages:
        for key in message:
            if key not in _CORE:
                seen.setdefault(key)
        for call in message.get("tool_calls") or ():
            if isinstance(call, Mapping):
                for key in call:
                    if key not in _CALL_CORE:
                        seen.setdefault(key)
                fn = call.get("function")
                if isinstance(fn, Mapping):
                    for key in fn:
                        if key not in _FUNCTION_CORE:
                            seen.setdefault(key)
    return [k for k in seen if k != "role"]


def _without_thinking(content: list[Any], tool_calls: bool) -> Any:
    """Assistant `content` parts without their thinking parts (reasoning that is not to go back): the text
    as a string when only text is left (None beside tool calls when there is none), else the other parts."""
    kept = [part for part in content if thinking_of(part) is None]
    if all(isinstance(p, dict) and p.get("type") == "text" for p in kept):
        text = "".join(str(p.get("text") or "") for p in kept)
        return text or (None if tool_calls else "")
    return kept
