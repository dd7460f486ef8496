"""What a server attaches to a streamed turn beside its answer and calls, kept to be sent back exactly.

`Attached` keeps reasoning text under each name it came in, reasoning blocks (`reasoning_details`,
`thinking_blocks`) merged per block (`Blocks`: by `index` and `type`, a signature never altered), and any
other delta key from its first non-empty value; `Parts` keeps content sent as typed parts beside text
(Mistral's `thinking` chunks). Which server sends which shape: docs/streaming.md. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..events import Event, ReasoningDelta
from ..history import thinking_of
from ..text import clean_json
from .pieces import Fired, TextBuffer, empty
from .profiles import BLOCK_TEXT_FIELDS, REASONING_BLOCK_FIELDS

__all__ = ["DELTA_KEYS", "Attached", "Block", "Blocks", "Parts"]

DELTA_KEYS = frozenset(("role", "content", "tool_calls", "refusal", "function_call"))
"""Delta keys the accumulator reads itself; any other key (reasoning, blocks, extensions) is `Attached`'s."""
_FIELD_TEXT_CHARS = 2_000_000
"""Characters kept of a string-valued delta key crow does not know, streamed in pieces (reasoning under a new
name): a server that never stops sending one cannot grow the message without bound."""
_BLOCK_FIELDS = frozenset(REASONING_BLOCK_FIELDS)


class Block:
    """One reasoning block being assembled: text fields as fragment lists, the rest first non-empty."""

    __slots__ = ("fields", "texts")

    def __init__(self) -> None:
        self.fields: dict[str, Any] = {}
        self.texts: dict[str, list[str]] = {}

    def add(self, piece: Mapping[str, Any]) -> None:
        for key, value in piece.items():
            if key in BLOCK_TEXT_FIELDS and isinstance(value, str):
                parts = self.texts.get(key)
                if parts is None:
                    self.texts[key] = parts = []
                    self.fields.setdefault(key, "")  # keeps the key's place among the fields
                if value:
                    parts.append(value)
            elif key not in self.fields or (not empty(value) and empty(self.fields[key])):
                self.fields[key] = value

    def value(self) -> dict[str, Any]:
        return {k: "".join(self.texts[k]) if k in self.texts else v for k, v in self.fields.items()}

    def signed(self) -> bool:
        return not empty(self.fields.get("signature"))

    def clashes(self, piece: Mapping[str, Any]) -> bool:
        """Whether `piece` brings another non-empty value for a field this block holds one of (a signature,
        a redacted block's `data`): merged, it would be lost, so it is another block's."""
        return any(key not in BLOCK_TEXT_FIELDS and not empty(value) and not empty(self.fields.get(key))
                   and self.fields[key] != value for key, value in piece.items())


class Blocks:
    """The blocks of one reasoning-block field (`profiles.REASONING_BLOCK_FIELDS`), in arrival order.

    A block is keyed by its piece's `index` and `type`: pieces of one block merge, a piece of another type
    at a used index starts a block of its own. A piece without an index belongs to the latest index, and
    one without a type to the latest block at its index; a text piece without an index after its block was
    signed starts a new block (LiteLLM sends no index, and a signature ends an Anthropic thinking block).
    """

    __slots__ = ("at", "blocks", "field", "index", "kinds")

    def __init__(self, field: str) -> None:
        self.field = field
        self.blocks: list[Block] = []
        self.at: dict[tuple[Any, Any], Block] = {}
        self.index: Any = 0  # the index a piece without one belongs to
        self.kinds: dict[Any, Any] = {}  # index -> the type of its latest block

    def add(self, piece: Mapping[str, Any], fired: Callable[[str, str], None]) -> str:
        """Merge one piece into its block; return its text to show."""
        text = next((t for name in BLOCK_TEXT_FIELDS if isinstance(t := piece.get(name), str) and t), "")
        if "index" in piece:
            self.index = piece["index"]
        where = self.index if isinstance(self.index, (int, str)) else repr(self.index)
        kind = piece.get("type") or self.kinds.get(where)
        block = self.at.get((where, kind))
        if block is not None and "index" not in piece and ((text and block.signed()) or block.clashes(piece)):
            self.index = where = f"+{len(self.blocks)}"  # a new block: the signed (or whole) one is complete
            block = None
            fired("reasoning-block-after-signature", f"{self.field}: a piece without an index after its block "
                  "was signed, or with a value its block holds already, starts a new block")
        self.kinds[where] = kind
        if block is None:
            block = self.at[(where, kind)] = Block()
            self.blocks.append(block)
            if len(self.blocks) > 1 and any(k[0] == where and k[1] != kind for k in self.at):
                fired("reasoning-block-type-at-used-index", f"a {kind} block in {self.field} at index {where}, "
                      "where a block of another type stands: kept as a block of its own")
        else:
            fired("reasoning-blocks-merged", f"{self.field} pieces of one block (same index and type) merged: "
                  "text joined, other fields from their first non-empty value")
        block.add(piece)
        return text


class Parts:
    """Content the server sent as typed parts beside text (Mistral: `{"type": "thinking", "thinking":
    [{"type": "text", "text": …}]}` chunks, then text), kept in order to go back as sent. Consecutive
    pieces of one kind merge: text joined, a thinking part's inner text joined (its other fields from their
    first non-empty value); a part of any other type is kept whole."""

    __slots__ = ("items",)

    def __init__(self, text: str) -> None:
        # ("text", [pieces]) | ("thinking", (Block, sent as a string)) | ("part", dict)
        self.items: list[tuple[str, Any]] = []
        if text:
            self.text(text)

    def text(self, text: str) -> None:
        if self.items and self.items[-1][0] == "text":
            self.items[-1][1].append(text)
        else:
            self.items.append(("text", [text]))

    def add(self, part: Mapping[str, Any]) -> str:
        """Keep one non-text part; return the reasoning text it carries (to show)."""
        if part.get("type") != "thinking":
            self.items.append(("part", dict(part)))
            return ""
        inner = part.get("thinking")
        text = thinking_of(part) or ""
        if not (self.items and self.items[-1][0] == "thinking"):
            self.items.append(("thinking", (Block(), isinstance(inner, str))))
        block: Block = self.items[-1][1][0]
        block.add({**part, "thinking": text})
        return text

    def value(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for kind, item in self.items:
            if kind == "text":
                out.append({"type": "text", "text": "".join(item)})
            elif kind == "thinking":
                block, as_string = item
                merged = block.value()
                if not as_string:  # as sent: a list of text chunks (none when none came)
                    thought = merged.get("thinking", "")
                    merged["thinking"] = [{"type": "text", "text": thought}] if thought else []
                out.append(merged)
            else:
                out.append(item)
        return out


class Attached:
    """The reasoning text, reasoning blocks and other keys of one turn's deltas, in arrival order.

    Args:
        names: the delta fields that carry reasoning text (`profiles.REASONING_FIELDS`).
        shown: the turn's shown reasoning: per delta, its first reasoning source is added to it and shown.
        fired: notes a rule that fired (`pieces.Fired`).
    """

    __slots__ = ("_blocks", "_extra", "_fields", "_fired", "_nested", "_reasoning", "_reasoning_names",
                 "_string_chars", "_strings")

    def __init__(self, names: tuple[str, ...], shown: TextBuffer, fired: Fired) -> None:
        self._reasoning_names = names
        self._reasoning = shown
        self._fired = fired
        self._fields: dict[str, TextBuffer] = {}  # reasoning text per field name, as sent
        self._blocks: dict[str, Blocks] = {}  # per reasoning-block field, in arrival order
        self._extra: dict[str, Any] = {}
        self._strings: dict[str, TextBuffer] = {}  # an unknown key whose value is text: its pieces, joined
        self._string_chars: dict[str, int] = {}
        self._nested: dict[str, dict[str, Any]] = {}  # an extra that holds reasoning blocks: merged per key

    def add(self, delta: Mapping[str, Any], events: list[Event]) -> None:
        """Take a delta's keys beside `DELTA_KEYS`: reasoning text (each name kept apart), reasoning blocks, any
        other key; a delta's first reasoning is shown (a `ReasoningDelta` in `events`)."""
        shown = False
        for key, value in delta.items():
            if key in DELTA_KEYS:
                continue
            if key in self._reasoning_names:
                if not isinstance(value, str) or not value:
                    continue
                buffer = self._fields.get(key)
                if buffer is None:
                    self._fields[key] = buffer = TextBuffer()
                    self._fired(f"reasoning-field:{key}", events, f"reasoning text arrives as {key}: kept under "
                                "that name")
                buffer.add(value)
                if not shown:  # a delta carrying two names (newer vLLM) is shown once
                    shown = True
                    if text := self._reasoning.add(value):
                        events.append(ReasoningDelta(text))
            elif key in REASONING_BLOCK_FIELDS:
                blocks = self._blocks.get(key)
                if blocks is None:
                    blocks = self._blocks[key] = Blocks(key)
                pieces = [value] if isinstance(value, Mapping) else value if isinstance(value, list) else ()
                for piece in pieces:
                    if isinstance(piece, Mapping):
                        text = blocks.add(piece, lambda rule, why: self._fired(rule, events, why))
                        if text and not shown and (text := self._reasoning.add(text)):
                            events.append(ReasoningDelta(text))
                shown = shown or bool(pieces)
            elif isinstance(value, Mapping) and (key in self._nested or not _BLOCK_FIELDS.isdisjoint(value)):
                self._nested_blocks(key, value, events)
            elif isinstance(value, str) and value and (key in self._strings or empty(self._extra.get(key))):
                self._string(key, value, events)
            elif not empty(value) and empty(self._extra.get(key)):
                self._extra[key] = value
                self._fired(f"message-field:{key}", events, f"the server attached {key!r} to the assistant "
                            "message: kept and sent back with it")

    def _string(self, key: str, value: str, events: list[Event]) -> None:
        """A text-valued key crow does not know: its pieces are joined as content's are (a server streaming
        reasoning under a new name), up to `_FIELD_TEXT_CHARS`; the same value sent again whole on the next
        delta is kept once."""
        buffer = self._strings.get(key)
        if buffer is None:
            self._strings[key] = buffer = TextBuffer()
            self._extra[key] = None  # its place among the fields; the value is the buffer's, at the end
            self._fired(f"message-field:{key}", events, f"the server attached {key!r} to the assistant "
                        "message: kept and sent back with it")
        elif buffer.parts == [value]:
            return
        else:
            self._fired(f"field-pieces:{key}", events, f"{key!r} arrives in pieces: joined, as content is")
        used = self._string_chars.get(key, 0)
        if used + len(value) > _FIELD_TEXT_CHARS:
            self._fired(f"field-cut:{key}", events, f"{key!r} is over {_FIELD_TEXT_CHARS} characters: the rest "
                        "is left out")
            return
        self._string_chars[key] = used + len(value)
        buffer.add(value)

    def _nested_blocks(self, key: str, value: Mapping[str, Any], events: list[Event]) -> None:
        """A delta key holding reasoning blocks of its own (LiteLLM repeats each piece in
        `provider_specific_fields.thinking_blocks`): its blocks are merged as the top-level ones are, its
        other keys keep their first non-empty value; kept whole, only the first piece went back."""
        nested = self._nested.get(key)
        if nested is None:
            first = self._extra.get(key)
            nested = self._nested[key] = dict(first) if isinstance(first, Mapping) else {}
            self._extra[key] = None  # its place among the fields; the value is `nested`'s, at the end
            self._fired(f"message-field:{key}", events, f"the server attached {key!r}, holding reasoning blocks, "
                        "to the assistant message: its blocks merged, kept and sent back with it")
        for sub, inner in value.items():
            if sub in _BLOCK_FIELDS:
                blocks = nested.get(sub)
                if not isinstance(blocks, Blocks):
                    blocks = nested[sub] = Blocks(f"{key}.{sub}")
                pieces = [inner] if isinstance(inner, Mapping) else inner if isinstance(inner, list) else ()
                for piece in pieces:
                    if isinstance(piece, Mapping):
                        blocks.add(piece, lambda rule, why: self._fired(rule, events, why))
            elif not empty(inner) and empty(nested.get(sub)):
                nested[sub] = inner

    def reasoning_keys(self) -> tuple[str, ...]:
        """The reasoning text and block fields the turn's deltas carried."""
        return (*self._fields, *self._blocks)

    def fields(self) -> dict[str, Any]:
        """Everything attached, by key, as it goes back with the message (`AssistantTurn.fields`): reasoning
        text fields first, then block fields, then the other keys in arrival order."""
        fields: dict[str, Any] = {}
        for name, buffer in self._fields.items():
            buffer.flush()
            if (text := buffer.value()) is not None:
                fields[name] = text
        for name, blocks in self._blocks.items():
            fields[name] = [clean_json(block.value()) for block in blocks.blocks]
        for key, value in self._extra.items():
            if (strings := self._strings.get(key)) is not None:
                strings.flush()
                value = strings.value()
            elif key in self._nested:
                value = {sub: [b.value() for b in v.blocks] if isinstance(v, Blocks) else v
                         for sub, v in self._nested[key].items()}
            fields.setdefault(key, clean_json(value))
        return fields
