"""The history as it goes on the wire: what the server attached comes back, minus what it refuses.

`Outgoing.messages` makes the copy of the stored history that is sent, message by message and once per message:
reasoning as `reasoning_echo` says, the message-field rules a server taught or the config gives
(`wire.rules.fields`), and messages another model wrote made fit for this reader (the stored session keeps the
originals). Kept apart from the client because it is pure (no I/O) and per message (`Outgoing` says how).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping
from typing import Any

from ..history import (
    AUTHOR_KEY,
    OUTCOME_KEY,
    REASONING_ITEMS_KEY,
    RECOVERED_KEY,
    RESPONSE_ID_KEY,
    Message,
    WireToolCall,
    as_json,
    author_of,
    thinking_of,
    tool_calls_of,
)
from ..images import sendable_content
from ..modes import REASONING_ECHO, ReasoningEcho
from .change import FieldPolicy
from .profiles import REASONING_BLOCK_FIELDS, REASONING_FIELDS
from .rules import (
    CALL_CORE,
    FUNCTION_CORE,
    DropField,
    FieldRule,
    MapToolCallIds,
    RequireField,
    ToolMessageName,
    field_facts,
    field_rules,
)

__all__ = ["REASONING_ECHO", "Outgoing", "ReasoningEcho"]

_BLOCKS = frozenset(REASONING_BLOCK_FIELDS)



class Outgoing:
    """The outgoing form of a history under one server's policy.

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

    Args:
        echo: `reasoning_echo`: `auto`, `always` or `never`.
        reasoning_fields: the reasoning text field names.
        known: facts remembered for this server (`wire.facts.recall`): `refused_fields`,
            `required_fields`, `tool_message_name`.
        author: the reader, `{"base_url": PUBLIC_URL, "model": M}` as `history.AUTHOR_KEY` records it;
            messages another author wrote are made fit for it (`Outgoing`). None: every message is
            the reader's own.
    """

    def __init__(self, echo: ReasoningEcho = "auto", *, reasoning_fields: tuple[str, ...] = REASONING_FIELDS,
                 known: Mapping[str, Any] | None = None, author: Mapping[str, str] | None = None) -> None:
        self.echo = echo
        self.author = dict(author) if author is not None else None
        self.reasoning = (*reasoning_fields, *REASONING_BLOCK_FIELDS)
        self._text_fields = reasoning_fields
        self.rules: list[FieldRule] = [r for r in field_rules(known or {}) if r.valid()]
        """The message-field rules in force (`wire.rules.FieldRule`): what the server refused or demanded."""
        self.dropped: list[str] = []
        """Fields refused by the server: sent on no message, tool call or function (`DropField`)."""
        self.required: list[str] = []
        """Reasoning fields the server demanded on every assistant message (`RequireField`)."""
        self.tool_name: bool | None = None
        """True: tool messages carry the function `name`; False: never (refused); None: as stored
        (`ToolMessageName`)."""
        self.ids: MapToolCallIds | None = None
        """The tool-call id shape the reader demands of ids it did not write; None: ids go as written."""
        self._given: list[FieldRule] = []  # added by the config: applied, never remembered
        self._drops: list[DropField] = []
        self._required: list[RequireField] = []
        self._name: ToolMessageName | None = None
        self._rules_changed()
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

    def _rules_changed(self) -> None:
        self._drops = [r for r in self.rules if isinstance(r, DropField)]
        self._required = [r for r in self.rules if isinstance(r, RequireField)]
        self._name = next((r for r in self.rules if isinstance(r, ToolMessageName)), None)
        self.ids = next((r for r in self.rules if isinstance(r, MapToolCallIds)), None)
        self.dropped = [r.target for r in self._drops]
        self.required = [r.target for r in self._required]
        self.tool_name = self._name.value if self._name is not None else None

    def add(self, rules: Iterable[FieldRule], *, learned: bool = True) -> None:
        """Apply `rules` from now on, each replacing a rule in force of its slot (`FieldRule.slot`: a field
        demanded after it was refused, or the reverse); every message is shaped again for the next request.
        `learned` False (rules the config gives): applied, never part of `learned()`."""
        for rule in rules:
            self.rules = [r for r in self.rules if r.slot != rule.slot] + [rule]
            self._given = [r for r in self._given if r.slot != rule.slot] + ([] if learned else [rule])
        self._rules_changed()
        self._version += 1

    def policy(self) -> FieldPolicy:
        """The message policy a refusal is read against (`wire.change.change_for`)."""
        return FieldPolicy(tuple(self.rules), self.reasoning, self._text_fields, self.echo == "auto",
                           self._foreign_ids if self.author is not None else None)

    def learned(self) -> dict[str, Any]:
        """The policy as facts to remember (`wire.facts.learn`): `wire.rules.field_facts` of its rules, those
        added as not learned (`add(learned=False)`) left out."""
        return field_facts(r for r in self.rules if r not in self._given)

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
        drop: list[str] = []
        if OUTCOME_KEY in message_json:
            drop.append(OUTCOME_KEY)  # crow's record of how the call ended
        if RECOVERED_KEY in message_json:
            drop.append(RECOVERED_KEY)  # the text recovered calls came in: they go as tool_calls
        if REASONING_ITEMS_KEY in message_json:
            drop.append(REASONING_ITEMS_KEY)  # Responses reasoning items: the Responses wire sends them itself
        if RESPONSE_ID_KEY in message_json:
            drop.append(RESPONSE_ID_KEY)  # a stored response's id: the Responses wire's own
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
                for required in self._required:
                    if required.target not in message_json or required.target in drop:
                        add[required.target] = required.text(message_json, self._text_fields)
        elif self.echo != "always":  # reasoning belongs to assistant messages only
            drop += [k for k in self.reasoning if k in message_json]
        if role == "tool" and call is not None and id(call) in self._call_ids:
            add["tool_call_id"] = self._call_ids[id(call)]
        calls = message_json.get("tool_calls") or [] if role == "assistant" else []
        content = message_json.get("content")
        if role == "assistant" and isinstance(content, list) and (
                self.echo == "never" or (self.echo == "auto" and not tools_used)) \
                and any(thinking_of(part) is not None for part in content):
            add["content"] = _without_thinking(content, bool(calls))
        elif isinstance(content, list) and (bare := sendable_content(content)) is not content:
            add["content"] = bare  # what crow keeps on an image part (its name) is crow's own
        out = message_json
        if drop or add:
            out = {k: v for k, v in message_json.items() if k not in drop}
            out.update(add)
        if role == "tool" and self._name is not None:
            out = self._name.named(out, call_name)
        for rule in self._drops:  # after the name: a refused `name` is never sent
            out = rule.message(out)
        return out

    def _for_reader(self, message: Message) -> dict[str, Any]:
        """An assistant message with a recorded author, without that record, made fit for this reader when
        another author wrote it (`Outgoing`). A copy; the stored message is never changed."""
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
        if text is None and blocks_text and self._required:  # plain reasoning, where the reader demands it
            out.setdefault(self._required[0].target, blocks_text)
        content = out.get("content")
        if isinstance(content, list) and any(thinking_of(p) is not None and "signature" in p for p in content):
            kept = [p for p in content if not (thinking_of(p) is not None and "signature" in p)]
            out["content"] = _without_thinking(kept, bool(out.get("tool_calls"))) if not any(
                thinking_of(p) is not None for p in kept) else kept
        calls = out.get("tool_calls")
        if isinstance(calls, list) and any(isinstance(c, dict) and (set(c) - CALL_CORE or (
                isinstance(c.get("function"), dict) and set(c["function"]) - FUNCTION_CORE)) for c in calls):
            out["tool_calls"] = [_bare_call(c) if isinstance(c, dict) else c for c in calls]
        if self.ids is not None and isinstance(calls, list):
            mapped = []
            for stored, sent in zip(calls, out["tool_calls"], strict=True):
                wire_id = sent.get("id") if isinstance(sent, dict) else None
                if isinstance(wire_id, str) and not self.ids.fits(wire_id):
                    self._call_ids[id(stored)] = new_id = self.ids.mapped(wire_id)
                    sent = {**sent, "id": new_id}
                mapped.append(sent)
            out["tool_calls"] = mapped
        return out

    def _foreign_ids(self, rule: MapToolCallIds) -> bool:
        """Whether some call of a message another author wrote (in the last history) has an id `rule` refuses."""
        return any(not rule.fits(c.get("id") or "") for m in self._seen if m["role"] == "assistant"
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


def _bare_call(call: dict[str, Any]) -> dict[str, Any]:
    """A tool call with only id, type and function (name, arguments): what its server attached (a thought
    signature) is bound to the model that made it."""
    out = {k: v for k, v in call.items() if k in CALL_CORE}
    fn = out.get("function")
    if isinstance(fn, dict):
        out["function"] = {k: v for k, v in fn.items() if k in FUNCTION_CORE}
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
