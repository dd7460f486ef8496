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

Each assistant message records who wrote it (`history.AUTHOR_KEY`, never sent). A session moves between
models and servers (`crow run -c --model B`, `/model`, a gateway routing elsewhere), so the reader of a
request is not always the author of its messages. The model's own output is sacred in the stored history and
for the model that produced it: its messages go back exactly as kept. Toward another reader (an author of
another base URL or model), what is bound to its author is made fit in the outgoing copy only (the stored
session keeps the originals, so switching back resends them):

* signed and encrypted reasoning is dropped: `reasoning_details` / `thinking_blocks` blocks (signatures,
  `reasoning.encrypted`, `redacted_thinking`), thinking content parts with a `signature`, and the keys a
  server attached to a tool call or its function (Gemini's `extra_content` thought signature); their text
  goes as plain reasoning only where the reader demands a reasoning field;
* reasoning text fields follow the reader's profile: a field the reader does not read is sent under its
  first reasoning field name;
* tool-call ids of a shape the reader refuses (a refusal names its rule: Anthropic-compatible
  `tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'`, Bedrock's `toolUseId` constraint, Mistral's
  "a-z, A-Z, 0-9, with a length of 9") are mapped to ids of its shape, the same in the assistant message and
  in the tool messages answering it. The mapped id is derived from a hash of the original (never random), so
  every request sends the same one, and is used for nothing else: the stored history, events and the model
  that wrote the id keep the original. The rule is taken from a fixed set of id shapes the refusal words
  match; no pattern a server sends is compiled.
A message without a recorded author (an older session) goes as kept. What crow keeps on an image part (its
name, `images.IMAGE_KEY`) is never sent.

What a refusal taught is applied for the client's life and returned by `Outgoing.learned` as facts
(`wire.facts`), so later runs start with it. Each message's outgoing form depends only on the
message, its exchange and the policy, so it is computed once and kept (per-turn work is proportional
to what the turn added). Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import operator
import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal, get_args

from ..history import AUTHOR_KEY, OUTCOME_KEY, Message, WireToolCall, as_json, author_of, thinking_of, tool_calls_of
from ..images import sendable_content
from .profiles import REASONING_BLOCK_FIELDS, REASONING_FIELDS
from .refusal import field_demanded, field_refused

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
        author: the reader, `{"base_url": PUBLIC_URL, "model": M}` as `history.AUTHOR_KEY` records it;
            messages another author wrote are made fit for it (module docstring). None: every message is
            the reader's own.
    """

    def __init__(self, echo: ReasoningEcho = "auto", *, reasoning_fields: tuple[str, ...] = REASONING_FIELDS,
                 known: Mapping[str, Any] | None = None, author: Mapping[str, str] | None = None) -> None:
        self.echo = echo
        self.author = dict(author) if author is not None else None
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
        self.id_rule: tuple[str, int | None] | None = None
        """The tool-call id shape the reader demands of ids it did not write: (`alnum_dash` or `alnum`, a
        length or None); None: ids go as written."""
        rule = known.get("tool_call_id_rule")
        if isinstance(rule, dict) and rule.get("chars") in _ID_CHARS and (
                rule.get("length") is None or (type(rule.get("length")) is int and 0 < rule["length"] <= 64)):
            self.id_rule = (rule["chars"], rule.get("length"))
        self._call_ids: dict[int, str] = {}
        """Mapped ids of the calls of messages another author wrote, by the identity of the stored call."""
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
        if self.id_rule is not None:
            facts["tool_call_id_rule"] = {"chars": self.id_rule[0], "length": self.id_rule[1]}
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
            self._call_ids = {}
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
            name, call = None, None
            if message["role"] == "user":
                self._open, self._open_state = begin + len(shaped), (calls, answered)
            elif message["role"] == "assistant":
                calls = tool_calls_of(message)
                answered = 0
            elif message["role"] == "tool":
                if answered < len(calls):
                    call = calls[answered]
                    name = call["function"]["name"]
                answered += 1
            shaped.append(self.shape(message, tools_used=tools_used, call_name=name, call=call))
        del self._sent[begin:]
        self._sent += shaped
        self._seen += new
        self._open_tools, self._state = used[-1], (calls, answered)
        return list(self._sent)

    def shape(self, message: Message, *, tools_used: bool, call_name: str | None = None,
              call: WireToolCall | None = None) -> dict[str, Any]:
        """One message as sent (itself when unchanged). `tools_used`: its exchange used tools; `call_name`
        and `call`: for a tool message, the function name of the call it answers and that call."""
        role = message["role"]
        message_json = as_json(message)  # reasoning and other attached fields are dropped or added by name
        if role == "assistant" and AUTHOR_KEY in message_json:
            message_json = self._for_reader(message)
        drop = [k for k in self.dropped if k in message_json and k not in _CORE]
        if OUTCOME_KEY in message_json:
            drop.append(OUTCOME_KEY)  # crow's record of how the call ended
        add: dict[str, Any] = {}
        if role == "assistant":
            if self.echo == "never" or (self.echo == "auto" and not tools_used):
                drop += [k for k in self.reasoning if k in message_json]
                for key, value in message_json.items():  # blocks held in another field (LiteLLM's
                    if isinstance(value, dict) and not _BLOCKS.isdisjoint(value):  # provider_specific_fields)
                        if rest := {k: v for k, v in value.items() if k not in _BLOCKS}:
                            add[key] = rest
                        else:
                            drop.append(key)
            if self.echo != "never":
                for key in self.required:
                    if key not in message_json or key in drop:
                        add[key] = next((message_json[k] for k in self._text_fields
                                         if isinstance(message_json.get(k), str)), "")
        elif self.echo != "always":  # reasoning belongs to assistant messages only
            drop += [k for k in self.reasoning if k in message_json]
        if role == "tool":
            if call is not None and id(call) in self._call_ids:
                add["tool_call_id"] = self._call_ids[id(call)]
            if self.tool_name and "name" not in message and call_name and "name" not in self.dropped:
                add["name"] = call_name
            elif self.tool_name is False and "name" in message:
                drop.append("name")
        calls = message_json.get("tool_calls") or [] if role == "assistant" else []
        new_calls = self._shape_calls(calls) if self.dropped and calls else calls
        content = message_json.get("content")
        if role == "assistant" and isinstance(content, list) and (
                self.echo == "never" or (self.echo == "auto" and not tools_used)) \
                and any(thinking_of(part) is not None for part in content):
            add["content"] = _without_thinking(content, bool(calls))
        elif isinstance(content, list) and (bare := sendable_content(content)) is not content:
            add["content"] = bare  # what crow keeps on an image part (its name) is crow's own
        if not drop and not add and new_calls is calls:
            return message_json
        out = {k: v for k, v in message_json.items() if k not in drop}
        out.update(add)
        if new_calls is not calls:
            out["tool_calls"] = new_calls
        return out

    def _for_reader(self, message: Message) -> dict[str, Any]:
        """An assistant message with a recorded author, without that record, made fit for this reader when
        another author wrote it (module docstring). A copy; the stored message is never changed."""
        out = {k: v for k, v in as_json(message).items() if k != AUTHOR_KEY}
        author = author_of(message)
        if author is None or self.author is None or author == self.author:
            return out
        text = next((out[k] for k in REASONING_FIELDS if isinstance(out.get(k), str) and out[k]), None)
        blocks_text = _blocks_text([out[k] for k in _BLOCKS if k in out])
        for key in list(out):
            value = out[key]
            if key in _BLOCKS:
                del out[key]
            elif isinstance(value, dict) and not _BLOCKS.isdisjoint(value):  # LiteLLM's provider_specific_fields
                blocks_text = blocks_text or _blocks_text([v for k, v in value.items() if k in _BLOCKS])
                rest = {k: v for k, v in value.items() if k not in _BLOCKS}
                if rest:
                    out[key] = rest
                else:
                    del out[key]
        for key in [k for k in REASONING_FIELDS if k in out and k not in self._text_fields]:
            value = out.pop(key)  # the reader reads its reasoning under its own name
            if self._text_fields and self._text_fields[0] not in out:
                out[self._text_fields[0]] = value
        if text is None and blocks_text and self.required:  # plain reasoning, where the reader demands it
            out.setdefault(self.required[0], blocks_text)
        content = out.get("content")
        if isinstance(content, list) and any(thinking_of(p) is not None and "signature" in p for p in content):
            kept = [p for p in content if not (thinking_of(p) is not None and "signature" in p)]
            out["content"] = _without_thinking(kept, bool(out.get("tool_calls"))) if not any(
                thinking_of(p) is not None for p in kept) else kept
        calls = out.get("tool_calls")
        if isinstance(calls, list) and any(isinstance(c, dict) and (set(c) - _CALL_CORE or (
                isinstance(c.get("function"), dict) and set(c["function"]) - _FUNCTION_CORE)) for c in calls):
            out["tool_calls"] = [_bare_call(c) if isinstance(c, dict) else c for c in calls]
        if self.id_rule is not None and isinstance(calls, list):
            mapped = []
            for stored, sent in zip(calls, out["tool_calls"], strict=True):
                wire_id = sent.get("id") if isinstance(sent, dict) else None
                if isinstance(wire_id, str) and not _fits(wire_id, self.id_rule):
                    self._call_ids[id(stored)] = new_id = _mapped_id(wire_id, self.id_rule)
                    sent = {**sent, "id": new_id}
                mapped.append(sent)
            out["tool_calls"] = mapped
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
        if self.id_rule is None and (rule := _id_rule(status, text)) is not None and self.author is not None:
            self.id_rule = rule
            self._version += 1
            if any(not _fits(c.get("id") or "", rule) for m in sent if m.get("role") == "assistant"
                   for c in m.get("tool_calls") or () if isinstance(c, dict)) and self._foreign_ids(rule):
                return Adaptation(f"the server refuses tool-call ids another model wrote ({status}); sending them "
                                  "in its id shape (mapped in this request only; the session keeps them)",
                                  {"tool_call_id_rule": {"chars": rule[0], "length": rule[1]}},
                                  f"tool-call ids of other models mapped to {rule}: a {status} names the id rule")
            self.id_rule = None
            self._version -= 1
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

    def _foreign_ids(self, rule: tuple[str, int | None]) -> bool:
        """Whether some call of a message another author wrote (in the last history) has an id `rule` refuses."""
        return any(not _fits(c.get("id") or "", rule) for m in self._seen if m["role"] == "assistant"
                   and (a := author_of(m)) is not None and a != self.author for c in tool_calls_of(m))

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


_ID_CHARS = {"alnum_dash": re.compile(r"[A-Za-z0-9_-]+"), "alnum": re.compile(r"[A-Za-z0-9]+")}
"""The tool-call id shapes crow knows (fixed patterns: no pattern from a server is compiled)."""
_ID_CONTEXT = re.compile(r"tool_use\.id|tool_use_id|toolUseId|tool_call_id|tool[ _]?call[ _]?id|tool_calls\[\d+\]\.id|"
                         r"tool_calls\.\d+\.id", re.IGNORECASE)
_ID_ALNUM_DASH = re.compile(r"\[a-zA-Z0-9_-\]|\[a-zA-Z0-9-_\]|\[A-Za-z0-9_-\]|\[a-z0-9A-Z_-\]")
_ID_NINE = re.compile(r"a-z, A-Z, 0-9,? with a length of (\d{1,2})", re.IGNORECASE)


def _id_rule(status: int, text: str) -> tuple[str, int | None] | None:
    """The id shape a 400/422 refusal of tool-call ids names, or None (`text` is read only up to 4000 characters)."""
    text = text[:4000]
    if status not in (400, 422) or not _ID_CONTEXT.search(text.replace('\\"', '"')):
        return None
    if (nine := _ID_NINE.search(text)) is not None:  # Mistral
        return "alnum", int(nine.group(1)) if 0 < int(nine.group(1)) <= 64 else None
    if _ID_ALNUM_DASH.search(text):  # Anthropic-compatible, Bedrock
        return "alnum_dash", None
    return None


def _fits(call_id: str, rule: tuple[str, int | None]) -> bool:
    chars, length = rule
    return _ID_CHARS[chars].fullmatch(call_id) is not None and (length is None or len(call_id) == length) \
        and len(call_id) <= 64


_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _mapped_id(call_id: str, rule: tuple[str, int | None]) -> str:
    """The id `call_id` is sent as to a reader of shape `rule`: derived from its SHA-256 (the same every time)."""
    number = int.from_bytes(hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).digest(), "big")
    digits = []
    while number:
        number, rest = divmod(number, 62)
        digits.append(_BASE62[rest])
    text = "".join(digits)
    length = rule[1]
    if length is not None:
        return text[:length]
    return f"call_{text[:24]}"


def _bare_call(call: dict[str, Any]) -> dict[str, Any]:
    """A tool call with only id, type and function (name, arguments): what its server attached (a thought
    signature) is bound to the model that made it."""
    out = {k: v for k, v in call.items() if k in _CALL_CORE}
    fn = out.get("function")
    if isinstance(fn, dict):
        out["function"] = {k: v for k, v in fn.items() if k in _FUNCTION_CORE}
    return out


def _blocks_text(values: list[Any]) -> str:
    """The readable text of reasoning blocks (`reasoning.text` / `thinking` text; summaries), joined."""
    parts: list[str] = []
    for value in values:
        for block in value if isinstance(value, list) else ():
            if isinstance(block, Mapping):
                for key in ("text", "thinking", "summary"):
                    if isinstance(block.get(key), str) and block[key]:
                        parts.append(block[key])
                        break
    return "".join(parts)


def _without_thinking(content: list[Any], tool_calls: bool) -> Any:
    """Assistant `content` parts without their thinking parts (reasoning that is not to go back): the text
    as a string when only text is left (None beside tool calls when there is none), else the other parts."""
    kept = [part for part in content if thinking_of(part) is None]
    if all(isinstance(p, dict) and p.get("type") == "text" for p in kept):
        text = "".join(str(p.get("text") or "") for p in kept)
        return text or (None if tool_calls else "")
    return kept
