"""The streamed tool-call accumulator: chunk dicts in, typed events and one `AssistantTurn` out.

Pure: no I/O, no printing, no clock. Rules (reference: `shared/reference/streaming-tool-calls.md`,
cases: `tests/cases/*.json`, each a shape a real server sent):

* Calls are keyed by the delta's `index`. A missing `index` means "the position in the array" when
  one delta carries several calls (Gemini), else "the latest call".
* `id`, `type` and `function.name` are taken from the first non-empty value; a later `""` or null
  never overwrites one (DashScope), an identical repeat is ignored (vLLM GLM). A name may arrive in
  pieces before the arguments do.
* A delta with a new non-empty id *and* a name starts a new call even at a used index, once the open
  call's arguments are complete JSON (Ollama sends every whole call at index 0). A fresh id without a
  name, a fresh id in the middle of the arguments, or no id, continues the open call (its first id
  stays): that one stays linear, since the parse runs only when the last fragment ends with `}`.
* `arguments` fragments are collected in a list and joined once at the end: linear in bytes received.
  An object-valued `arguments` (MiniMax) is serialised; a fragment that repeats the complete
  arguments so far (final-chunk flush) is not appended.
* Argument fragments at an index that never received an id or a name by the end of the stream
  (a server gave the header the tool's index in the request's `tools` list and the arguments the
  call's index) belong to the one call whose own arguments are still empty or incomplete JSON, when
  exactly one such call exists; they are merged into it in arrival order. Otherwise they are dropped
  with a warning. Decided only at `finish`, so a name that arrives late at that index still opens
  the call there (vLLM Command A). A call that never got a name is never sent back or run: it is
  dropped with a warning.
* A turn is a tool turn whenever calls were assembled, whatever `finish_reason` said.
* Whatever else the server attaches to the turn is kept to be sent back exactly (`AssistantTurn.fields`):
  reasoning text under each name it came in (`reasoning_content`, `reasoning`, …: pieces joined per
  name), reasoning blocks (`reasoning_details`: OpenRouter and gateways in front of Anthropic, Gemini,
  OpenAI; `thinking_blocks`: LiteLLM) keyed by their `index` *and* `type`: pieces of one block are merged
  (`text` / `summary` / `thinking` joined, any other field from its first non-empty value, so a signature
  is never altered), a piece of another type at the same index starts a new block (`_Blocks`); and any
  other delta key or tool-call key (`extra_content`
  holding a Gemini thought signature) from its first non-empty value. Nothing is ever invented.
* Content sent as typed parts with a part other than text (Mistral's `thinking` chunks) is kept as those
  parts, merged and in order, and goes back so (`AssistantTurn.parts`); thinking shows as reasoning.
* `<think>…</think>` at the start of content (llama.cpp / MiniMax templates) stays in the content
  verbatim; its inside is shown as reasoning (`ReasoningDelta`), not as answer text.
* Odd continuation values: a `function.name` of `"null"` is no name; `type` is never read (`FUNCTION`).
  We never set `n`, so there is one answer: a chunk with one choice is ours whatever its `index` (a
  local runtime counts it up on every chunk; warned once), of several only index 0 is.
* `AssistantTurn.rules` names each rule that fired, in first-firing order (`crow probe` reports them).
* `delta.refusal` (OpenAI) is collected apart from content and reported once whole as a warning
  (`the model refused: …`); a turn with no text, no calls and no refusal warns that it is empty.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..events import Event, Notice, ReasoningDelta, TextDelta, ToolCallDelta, ToolCallStarted, WarningEvent
from ..history import AssistantTurn, ToolCall, thinking_of
from ..text import clean_json, clean_text, has_surrogates
from .errors import stream_error
from .profiles import BLOCK_TEXT_FIELDS, REASONING_BLOCK_FIELDS, REASONING_FIELDS
from .repair import repair_arguments

__all__ = ["StreamAccumulator"]

_HIGH_SURROGATES = ("\ud800", "\udbff")
_HIGH_HALVES = frozenset(map(chr, range(0xD800, 0xDC00)))
_LOW_HALVES = frozenset(map(chr, range(0xDC00, 0xE000)))


@dataclass(slots=True)
class _PartialCall:
    key: int
    """The stream's index (or the position it stood for) where this call's deltas arrive."""
    seq: int = -1
    """Call order, given when the call first gets an id or a name; -1 until then."""
    id: str = ""
    name: str = ""
    fragments: list[str] = field(default_factory=list)
    runs: list[tuple[int, int]] = field(default_factory=list)
    """(run number, position in `fragments`) where each unbroken run of this call's fragments starts:
    a run ends when a fragment of another call arrives. Orders merged fragments in linear time."""
    length: int = 0
    announced: bool = False
    extra: dict[str, Any] | None = None
    """Tool-call keys beside index/id/type/function (`extra_content`), first non-empty value each."""
    fn_extra: dict[str, Any] | None = None
    """`function` keys beside name/arguments, the same way."""
    custom: bool = False
    """A `type: "custom"` call: its name came in `custom.name`, its fragments are `custom.input` text."""

    def joined(self) -> str:
        return "".join(self.fragments)

    def arguments_complete(self) -> bool:
        try:
            json.loads(self.joined())
        except (ValueError, RecursionError):
            return False
        return True


def _merge_fragments(target: _PartialCall, others: list[_PartialCall]) -> None:
    """Give `target` the fragments of `others` too, all in arrival order (runs sorted by number)."""
    runs: list[tuple[int, list[str]]] = []
    for partial in (target, *others):
        if not partial.runs:
            continue
        ends = [start for _, start in partial.runs[1:]] + [len(partial.fragments)]
        runs += [(number, partial.fragments[start:end])
                 for (number, start), end in zip(partial.runs, ends, strict=True)]
    runs.sort(key=lambda run: run[0])
    target.fragments = [fragment for _, fragments in runs for fragment in fragments]
    target.runs = [(runs[0][0], 0)] if runs else []
    target.length = sum(len(f) for f in target.fragments)


class _TextBuffer:
    """Collects text deltas; holds back a trailing high surrogate until its low half arrives."""

    __slots__ = ("_held", "parts")

    def __init__(self) -> None:
        self.parts: list[str] = []
        self._held = ""

    def add(self, text: str) -> str:
        """Append `text`; return what may be shown now (surrogates paired)."""
        if self._held:
            text, self._held = self._held + text, ""
        if has_surrogates(text):
            if _HIGH_SURROGATES[0] <= text[-1] <= _HIGH_SURROGATES[1]:
                text, self._held = text[:-1], text[-1]
            text = clean_text(text)
        if text:
            self.parts.append(text)
        return text

    def flush(self) -> str:
        """The held-back half, if any, as U+FFFD (it will never be paired now)."""
        tail, self._held = clean_text(self._held), ""
        if tail:
            self.parts.append(tail)
        return tail

    def value(self) -> str | None:
        return "".join(self.parts) or None


_LEAKED_TAGS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<|im_end|>")
"""Tags of the Hermes/ChatML tool-call templates (Qwen, SmolLM2 under crow's `data/llama-tools.jinja`) that
small models served by llama.cpp leak into the answer text (`</tool_response>` after a result)."""
_LEAKED_TAG = re.compile("(?:" + "|".join(re.escape(tag) for tag in _LEAKED_TAGS) + r")\n?")


class _LeakFilter:
    """Drops `_LEAKED_TAGS` from content text, also when a tag arrives split over deltas: a trailing piece
    that may still become one is held back until it does or cannot. Linear; text without `<` passes as is."""

    __slots__ = ("_held", "dropped")

    def __init__(self) -> None:
        self._held = ""
        self.dropped = False

    def feed(self, text: str) -> str:
        if not self._held and "<" not in text:
            return text
        text, self._held = self._held + text, ""
        if "<" not in text:
            return text
        cleaned = _LEAKED_TAG.sub("", text)
        self.dropped = self.dropped or cleaned != text
        start = cleaned.rfind("<")
        tail = cleaned[start:]
        if start >= 0 and len(tail) < 16 and any(tag.startswith(tail) for tag in _LEAKED_TAGS):
            cleaned, self._held = cleaned[:start], tail
        return cleaned

    def flush(self) -> str:
        """What was held back: it never became a tag, so it is text."""
        tail, self._held = self._held, ""
        return tail


_CALL_KEYS = frozenset(("index", "id", "type", "function"))
_FN_KEYS = frozenset(("name", "arguments"))
_DELTA_KEYS = frozenset(("role", "content", "tool_calls", "refusal", "function_call"))
_FIELD_TEXT_CHARS = 2_000_000
"""Characters kept of a string-valued delta key crow does not know, streamed in pieces (reasoning under a new
name): a server that never stops sending one cannot grow the message without bound."""
"""Delta keys the fast path reads; any other key (reasoning, blocks, extensions) takes `_delta_extras`."""
_BLOCK_FIELDS = frozenset(REASONING_BLOCK_FIELDS)
_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"


def _empty(value: Any) -> bool:
    return value is None or value == "" or value == {} or value == []


def _keep_first(into: dict[str, Any], key: str, value: Any) -> None:
    """`into[key] = value` unless it holds a non-empty value already (the tool-call id rule)."""
    if not _empty(value) and _empty(into.get(key)):
        into[key] = value


class _Block:
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
            elif key not in self.fields or (not _empty(value) and _empty(self.fields[key])):
                self.fields[key] = value

    def value(self) -> dict[str, Any]:
        return {k: "".join(self.texts[k]) if k in self.texts else v for k, v in self.fields.items()}

    def signed(self) -> bool:
        return not _empty(self.fields.get("signature"))

    def clashes(self, piece: Mapping[str, Any]) -> bool:
        """Whether `piece` brings another non-empty value for a field this block holds one of (a signature,
        a redacted block's `data`): merged, it would be lost, so it is another block's."""
        return any(key not in BLOCK_TEXT_FIELDS and not _empty(value) and not _empty(self.fields.get(key))
                   and self.fields[key] != value for key, value in piece.items())


class _Blocks:
    """The blocks of one reasoning-block field (`profiles.REASONING_BLOCK_FIELDS`), in arrival order.

    A block is keyed by its piece's `index` and `type`: pieces of one block merge, a piece of another type
    at a used index starts a block of its own. A piece without an index belongs to the latest index, and
    one without a type to the latest block at its index; a text piece without an index after its block was
    signed starts a new block (LiteLLM sends no index, and a signature ends an Anthropic thinking block).
    """

    __slots__ = ("at", "blocks", "field", "index", "kinds")

    def __init__(self, field: str) -> None:
        self.field = field
        self.blocks: list[_Block] = []
        self.at: dict[tuple[Any, Any], _Block] = {}
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
            block = self.at[(where, kind)] = _Block()
            self.blocks.append(block)
            if len(self.blocks) > 1 and any(k[0] == where and k[1] != kind for k in self.at):
                fired("reasoning-block-type-at-used-index", f"a {kind} block in {self.field} at index {where}, "
                      "where a block of another type stands: kept as a block of its own")
        else:
            fired("reasoning-blocks-merged", f"{self.field} pieces of one block (same index and type) merged: "
                  "text joined, other fields from their first non-empty value")
        block.add(piece)
        return text


class _Parts:
    """Content the server sent as typed parts beside text (Mistral: `{"type": "thinking", "thinking":
    [{"type": "text", "text": …}]}` chunks, then text), kept in order to go back as sent. Consecutive
    pieces of one kind merge: text joined, a thinking part's inner text joined (its other fields from their
    first non-empty value); a part of any other type is kept whole."""

    __slots__ = ("items",)

    def __init__(self, text: str) -> None:
        # ("text", [pieces]) | ("thinking", (_Block, sent as a string)) | ("part", dict)
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
            self.items.append(("thinking", (_Block(), isinstance(inner, str))))
        block: _Block = self.items[-1][1][0]
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


class _ThinkSplit:
    """Which part of the content is a leading `<think>…</think>` block (shown as reasoning); linear."""

    __slots__ = ("_held", "_state", "plain")

    def __init__(self) -> None:
        self._state = 0  # 0: may still open, 1: inside the block, 2: plain text
        self._held = ""
        self.plain = False
        """Past any think block: all text from here on is answer text (the hot path's test)."""

    def split(self, text: str, events: list[Event]) -> bool:
        """Append the events for `text`; True when a think block opened just now."""
        if self._state == 2:
            events.append(TextDelta(text))
            return False
        text, self._held = self._held + text, ""
        opened = False
        if self._state == 0:
            head = text.lstrip()
            if head.startswith(_THINK_OPEN):
                self._state, text, opened = 1, head[len(_THINK_OPEN):], True
            elif not head:  # only whitespace so far: shown, and a think block may still open
                events.append(TextDelta(text))
                return False
            elif _THINK_OPEN.startswith(head):  # "<", "<thi" …: not decided yet
                self._held = text
                return False
            else:
                self._state, self.plain = 2, True
                events.append(TextDelta(text))
                return False
        end = text.find(_THINK_CLOSE)
        if end >= 0:
            self._state, self.plain = 2, True
            if end:
                events.append(ReasoningDelta(text[:end]))
            if rest := text[end + len(_THINK_CLOSE):].lstrip("\n"):
                events.append(TextDelta(rest))
            return opened
        keep = next((n for n in range(min(len(text), len(_THINK_CLOSE) - 1), 0, -1)
                     if _THINK_CLOSE.startswith(text[-n:])), 0)
        if keep:
            text, self._held = text[:-keep], text[-keep:]
        if text:
            events.append(ReasoningDelta(text))
        return opened

    def flush(self, events: list[Event]) -> None:
        if self._held:
            events.append(ReasoningDelta(self._held) if self._state == 1 else TextDelta(self._held))
            self._held = ""


class StreamAccumulator:
    """Assembles one streamed Chat Completions turn.

    Feed it every chunk (the decoded JSON of each SSE `data:` line, as a dict) with `feed`, which
    returns the events that chunk produced; then call `finish` once for the assembled turn.

    Args:
        trace: also emit a `ToolCallDelta` for every raw tool-call delta, and a `Notice(code="debug")` for
            the first firing of each rule that keeps something the server attached (for `--debug`).
        reasoning_fields: the delta fields that carry reasoning text (`profiles.REASONING_FIELDS`).
        choices: the number of choices the request asked for (`n`). The turn is choice 0; other choices
            (several in one chunk, `n` above 1, or a choice numbered otherwise after choice 0 finished)
            are ignored with one notice, never merged into it.

    Raises:
        ServerError: from `feed`, for a chunk carrying an `error` object instead of choices.
    """

    def __init__(self, *, trace: bool = False, reasoning_fields: tuple[str, ...] = REASONING_FIELDS,
                 choices: int = 1) -> None:
        self._trace = trace
        self._many_choices = choices > 1
        self._reasoning_names = reasoning_fields
        self._calls: list[_PartialCall] = []
        self._by_key: dict[int, _PartialCall] = {}
        self._headed = 0  # calls given a `seq` so far
        self._run = 0  # fragment runs so far (see `_PartialCall.runs`)
        self._last_fed: _PartialCall | None = None
        self._latest_key: int | None = None
        self._text = _TextBuffer()
        self._think = _ThinkSplit()
        self._leaks = _LeakFilter()
        self._reasoning = _TextBuffer()  # what is shown: per delta, its first reasoning source
        self._fields: dict[str, _TextBuffer] = {}  # reasoning text per field name, as sent
        self._blocks: dict[str, _Blocks] = {}  # per reasoning-block field, in arrival order
        self._extra: dict[str, Any] = {}
        self._strings: dict[str, _TextBuffer] = {}  # an unknown key whose value is text: its pieces, joined
        self._string_chars: dict[str, int] = {}
        self._nested: dict[str, dict[str, Any]] = {}  # an extra that holds reasoning blocks: merged per key
        self._refusal = _TextBuffer()
        self._parts: _Parts | None = None  # content sent as typed parts beside text (Mistral thinking)
        self._finish_reason: str | None = None
        self._usage: dict[str, Any] | None = None
        self._timings: dict[str, Any] | None = None
        self._rules: dict[str, None] = {}
        self._choice_index_warned = False

    def _fired(self, rule: str, events: list[Event] | None = None, why: str = "") -> None:
        if rule not in self._rules:
            self._rules[rule] = None
            if self._trace and why and events is not None:
                events.append(Notice(f"crow: debug: {why}", code="debug"))

    def feed(self, chunk: Mapping[str, Any]) -> list[Event]:
        """Take one chunk; return the events it produced (text, reasoning, tool calls opened)."""
        events: list[Event] = []
        if not isinstance(chunk, dict) and not isinstance(chunk, Mapping):
            return events
        if chunk.get("error"):
            raise stream_error(chunk["error"])
        usage = chunk.get("usage")
        if usage is not None and isinstance(usage, Mapping):
            self._usage = dict(usage)
        timings = chunk.get("timings")  # llama.cpp's, beside usage: cache_n counts the prompt tokens it reused
        if timings is not None and isinstance(timings, Mapping):
            self._timings = dict(timings)
        progress = chunk.get("prompt_progress")  # llama.cpp with return_progress, before the first token
        if progress is not None and isinstance(progress, Mapping):
            done, total = progress.get("processed"), progress.get("total")
            if type(done) is int and type(total) is int and total > 0:
                events.append(Notice(f"processing the prompt ({done:,} of {total:,} tokens)…", code="prompt_progress"))
        choices: Any = chunk.get("choices") or ()  # [] on usage-only and content-filter chunks
        if type(choices) is list and len(choices) == 1 and self._one_key(choices[0], events):
            return events
        for choice in choices:
            if not isinstance(choice, Mapping):
                continue
            if choice.get("index") not in (0, None):
                if len(choices) > 1 or self._many_choices or self._finish_reason is not None:
                    if not self._choice_index_warned:  # another answer (n > 1): ours is choice 0
                        self._choice_index_warned = True
                        self._fired("other-choices-ignored")
                        events.append(Notice("crow: the server sent several choices; the turn is choice 0, "
                                             "the others are ignored", code="choices_ignored"))
                    continue
                if not self._choice_index_warned:  # one choice, counted up (a local runtime): still ours
                    self._choice_index_warned = True
                    self._fired("choice-index-varies")
                    events.append(WarningEvent(f"the server numbered its one choice {choice.get('index')!r}, "
                                               "not 0 (n is not set, so there is one answer): assembled as one"))
            delta = choice.get("delta") or {}
            if not isinstance(delta, Mapping):
                delta = {}
            if not _DELTA_KEYS.issuperset(delta):
                self._delta_extras(delta, events)
            content = delta.get("content")
            if isinstance(content, list):  # content parts
                content = self._content_parts(content, events)
            elif self._parts is not None and isinstance(content, str) and content:
                self._parts.text(content)
            if isinstance(content, str) and content and (shown := self._text.add(self._leaks.feed(content))) \
                    and self._think.split(shown, events):
                self._fired("think-in-content", events, "a <think> block opens the content: shown as "
                            "reasoning, kept in the content as sent")
            refusal = delta.get("refusal")  # OpenAI: streamed in pieces like content, shown once whole
            if isinstance(refusal, str) and refusal:
                self._refusal.add(refusal)
            tool_calls = delta.get("tool_calls")
            if isinstance(tool_calls, Mapping):  # one call sent bare instead of in a list
                tool_calls = [tool_calls]
            if tool_calls:
                if len(tool_calls) > 1:
                    self._several(tool_calls)
                for position, tc in enumerate(tool_calls):
                    if isinstance(tc, Mapping):
                        self._tool_delta(tc, position, len(tool_calls), events)
            if choice.get("finish_reason"):
                self._finish_reason = str(choice["finish_reason"])
        return events

    def _one_key(self, choice: Any, events: list[Event]) -> bool:
        """The hot path: a chunk whose delta is one piece of text, or one argument fragment of an open
        call, taken here (True); anything else (False) goes the general way, which reaches the same result."""
        if type(choice) is not dict or choice.get("finish_reason") or choice.get("index") not in (0, None):
            return False
        delta = choice.get("delta")
        if type(delta) is not dict or len(delta) != 1 or self._trace:
            return False
        content = delta.get("content")
        if type(content) is str and self._parts is None:
            if content and (shown := self._text.add(self._leaks.feed(content))):
                if self._think.plain:
                    events.append(TextDelta(shown))
                elif self._think.split(shown, events):
                    self._fired("think-in-content")
            return True
        calls = delta.get("tool_calls")
        if type(calls) is not list or len(calls) != 1:
            return False
        tc = calls[0]
        if type(tc) is not dict or len(tc) != 2:
            return False
        fn, key = tc.get("function"), tc.get("index")
        if type(fn) is not dict or len(fn) != 1 or type(key) is not int:
            return False
        args = fn.get("arguments")
        call = self._by_key.get(key)
        if type(args) is not str or call is None or (args and call.length == len(args)):
            return False  # no call yet, or possibly the whole arguments repeated: the general path decides
        self._latest_key = key
        if args:
            self._fragment(call, args)
        return True

    def _fragment(self, call: _PartialCall, args: str) -> None:
        """Append one non-empty argument fragment to `call` (its run noted for orphan merging)."""
        if args[-1] in _HIGH_HALVES or args[0] in _LOW_HALVES:
            self._fired("lone-surrogates")
        if call is not self._last_fed:
            self._run += 1
            call.runs.append((self._run, len(call.fragments)))
            self._last_fed = call
        call.fragments.append(args)
        call.length += len(args)

    def _content_parts(self, parts: list[Any], events: list[Event]) -> str:
        """The answer text of a delta whose content is a list of parts; any other part (Mistral's
        `thinking` chunks) switches to keeping the content as parts (`_Parts`) and shows as reasoning."""
        texts: list[str] = []
        for part in parts:
            if not isinstance(part, Mapping):
                continue
            kind, text = part.get("type"), part.get("text")
            if kind in (None, "text") and isinstance(text, str):
                texts.append(text)
                if self._parts is not None and text:
                    self._parts.text(text)
                continue
            if self._parts is None:
                self._parts = _Parts((self._text.value() or "") + "".join(texts))  # text so far, this delta's too
                self._fired("content-parts", events, f"the content arrives in typed parts ({kind!r}): kept as "
                            "parts, in order, and sent back so")
            if (thought := self._parts.add(part)) and (shown := self._reasoning.add(thought)):
                events.append(ReasoningDelta(shown))
        return "".join(texts)

    def _delta_extras(self, delta: Mapping[str, Any], events: list[Event]) -> None:
        """Reasoning text (each name kept apart), reasoning blocks, and any other key of a delta."""
        shown = False
        for key, value in delta.items():
            if key in _DELTA_KEYS:
                continue
            if key in self._reasoning_names:
                if not isinstance(value, str) or not value:
                    continue
                buffer = self._fields.get(key)
                if buffer is None:
                    self._fields[key] = buffer = _TextBuffer()
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
                    blocks = self._blocks[key] = _Blocks(key)
                pieces = [value] if isinstance(value, Mapping) else value if isinstance(value, list) else ()
                for piece in pieces:
                    if isinstance(piece, Mapping):
                        text = blocks.add(piece, lambda rule, why: self._fired(rule, events, why))
                        if text and not shown and (text := self._reasoning.add(text)):
                            events.append(ReasoningDelta(text))
                shown = shown or bool(pieces)
            elif isinstance(value, Mapping) and (key in self._nested or not _BLOCK_FIELDS.isdisjoint(value)):
                self._nested_extra(key, value, events)
            elif isinstance(value, str) and value and (key in self._strings or _empty(self._extra.get(key))):
                self._string_extra(key, value, events)
            elif not _empty(value) and _empty(self._extra.get(key)):
                self._extra[key] = value
                self._fired(f"message-field:{key}", events, f"the server attached {key!r} to the assistant "
                            "message: kept and sent back with it")

    def _string_extra(self, key: str, value: str, events: list[Event]) -> None:
        """A text-valued key crow does not know: its pieces are joined as content's are (a server streaming
        reasoning under a new name), up to `_FIELD_TEXT_CHARS`; the same value sent again whole on the next
        delta is kept once."""
        buffer = self._strings.get(key)
        if buffer is None:
            self._strings[key] = buffer = _TextBuffer()
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

    def _nested_extra(self, key: str, value: Mapping[str, Any], events: list[Event]) -> None:
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
                if not isinstance(blocks, _Blocks):
                    blocks = nested[sub] = _Blocks(f"{key}.{sub}")
                pieces = [inner] if isinstance(inner, Mapping) else inner if isinstance(inner, list) else ()
                for piece in pieces:
                    if isinstance(piece, Mapping):
                        blocks.add(piece, lambda rule, why: self._fired(rule, events, why))
            elif not _empty(inner) and _empty(nested.get(sub)):
                nested[sub] = inner

    def _tool_delta(self, tc: Mapping[str, Any], position: int, count: int, events: list[Event]) -> None:
        fn = tc.get("function") or {}
        if not isinstance(fn, Mapping):
            fn = {}
        custom = tc.get("custom")
        if isinstance(custom, Mapping) and not fn:  # OpenAI's freeform tools: {name, input}, input as text
            fn = {"name": custom.get("name"), "arguments": custom.get("input")}
            tc = {k: v for k, v in tc.items() if k != "custom"}
        raw_index = tc.get("index")
        raw_id, raw_name = tc.get("id"), fn.get("name")
        call_id: str = raw_id if isinstance(raw_id, str) else ""
        name: str = raw_name if isinstance(raw_name, str) and raw_name != "null" else ""
        args = fn.get("arguments")
        if self._trace:
            events.append(ToolCallDelta(raw_index, tc.get("id"), fn.get("name"),
                                        args if args is None or isinstance(args, str) else json.dumps(args)))
        if isinstance(raw_index, int):
            key = raw_index
        elif count > 1:
            key = position
            self._fired("index-missing")
        else:
            key = self._latest_key if self._latest_key is not None else 0
            self._fired("index-missing")
        self._latest_key = key
        call = self._by_key.get(key)
        if call is None or (name and self._starts_new_call(call, call_id, name)):
            if call is not None:
                self._fired("index-reused")
            call = _PartialCall(key=key)
            self._calls.append(call)
            self._by_key[key] = call
        elif raw_id is not None or raw_name is not None or args is None:
            self._continuation(call, raw_id, name, raw_name, args)
        if isinstance(custom, Mapping) and not call.custom:
            call.custom = True
            self._fired("custom-tool-call")
        if call_id and not call.id:
            call.id = call_id
        if name and name != call.name:
            call.name = name if not call.name else call.name + name  # a name sent in pieces
        if call.seq < 0 and (call.id or call.name):
            call.seq, self._headed = self._headed, self._headed + 1
        if not _CALL_KEYS.issuperset(tc):
            call.extra = call.extra or {}
            for k, v in tc.items():
                if k not in _CALL_KEYS:
                    _keep_first(call.extra, k, v)
            if "tool-call-fields" not in self._rules:  # its note is built once, not on every delta
                self._fired("tool-call-fields", events, f"tool call {call.name or key}: the server attached "
                            f"{sorted(k for k in tc if k not in _CALL_KEYS)} to it: kept and sent back with the call")
        if not _FN_KEYS.issuperset(fn):
            call.fn_extra = call.fn_extra or {}
            for k, v in fn.items():
                if k not in _FN_KEYS:
                    _keep_first(call.fn_extra, k, v)
        if args is not None:
            if not isinstance(args, str):
                args = json.dumps(args, ensure_ascii=False)
                self._fired("arguments-object")
            if args and self._repeats_whole(call, args):
                self._fired("arguments-repeated")
            elif args:
                self._fragment(call, args)
        if call.name and not call.announced:
            call.announced = True
            events.append(ToolCallStarted(call.seq, call.id, call.name))

    def _several(self, tool_calls: list[Any]) -> None:
        """Name a delta holding several entries: one index twice, or several named calls."""
        entries = [tc for tc in tool_calls if isinstance(tc, Mapping)]
        keys = [tc.get("index") for tc in entries if isinstance(tc.get("index"), int)]
        if len(set(keys)) < len(keys):
            self._fired("same-index-twice")
        named = [tc for tc in entries if isinstance(tc.get("function"), Mapping) and tc["function"].get("name")]
        if len(named) > 1:
            self._fired("calls-in-one-delta")

    def _continuation(self, call: _PartialCall, raw_id: Any, name: str, raw_name: Any, args: Any) -> None:
        """Name what a delta of an open call re-sends (the rules `crow probe` reports)."""
        if isinstance(raw_id, str):
            if raw_id == "":
                self._fired("ids-empty-on-continuation")
            elif raw_id == call.id:
                self._fired("ids-repeated")
            elif call.id:
                self._fired("ids-fresh-on-fragments")
        if name:
            if name == call.name:
                self._fired("name-repeated")
            elif call.name:
                self._fired("name-split")
            elif call.length:
                self._fired("name-after-arguments")
        elif raw_name == "null":
            self._fired("name-null-on-continuation")
        if not name and args is None and not raw_id:
            self._fired("empty-function-delta")

    def calls_seen(self) -> list[tuple[int, str, tuple[str, ...], bool]]:
        """Every call the stream opened, named or not, in opening order: its index key, its name, its
        argument fragments as kept, and whether they came interleaved with another call's (`crow probe`)."""
        return [(p.key, p.name, tuple(p.fragments), len(p.runs) > 1) for p in self._calls]

    @staticmethod
    def _starts_new_call(call: _PartialCall, call_id: str, name: str) -> bool:
        if not (call_id and call.id and call_id != call.id):
            return False  # no id, or the same one re-sent (vLLM GLM): the open call goes on
        if not call.length:
            return True
        # Ollama: every whole call at index 0, each with its own id
        return call.fragments[-1].rstrip().endswith("}") and call.arguments_complete()

    @staticmethod
    def _repeats_whole(call: _PartialCall, args: str) -> bool:
        # Joining only when the lengths match keeps this linear: the join costs no more than `args`.
        return call.length == len(args) and call.joined() == args and call.arguments_complete()

    def _named_calls(self, events: list[Event]) -> list[_PartialCall]:
        """The calls to send back, in call order: orphan fragments attributed, nameless calls dropped."""
        headed = sorted((p for p in self._calls if p.seq >= 0), key=lambda p: p.seq)
        orphans = [p for p in self._calls if p.seq < 0 and p.length]
        if orphans:
            where = ", ".join(str(p.key) for p in orphans)
            open_calls = [p for p in headed if p.name and not (p.length and p.arguments_complete())]
            if len(open_calls) == 1:
                target = open_calls[0]
                _merge_fragments(target, orphans)
                self._fired("orphan-fragments-merged")
                if self._trace:
                    events.append(WarningEvent(f"tool call {target.name} [{target.id or 'no id'}] (index {target.key}):"
                                               f" took the argument fragments sent at index {where}, which never"
                                               " opened a call", target.id))
            else:
                self._fired("orphan-fragments-dropped")
                events.append(WarningEvent(f"dropped {sum(p.length for p in orphans)} characters of tool-call "
                                           f"arguments sent at index {where}, which never opened a call: "
                                           f"{len(open_calls)} calls were open to take them, not one"))
        named = []
        for partial in headed:
            if partial.name:
                named.append(partial)
            else:
                self._fired("nameless-call-dropped")
                events.append(WarningEvent(f"tool call [{partial.id}] (index {partial.key}): the server sent no "
                                           "function name; the call is dropped, neither run nor sent back",
                                           partial.id))
        return named

    def finish(self) -> tuple[AssistantTurn, list[Event]]:
        """The assembled turn, plus any final events (flushed text, repair warnings).

        Calls are in call order (the order in which the stream gave each its id or name); each
        `arguments` is valid JSON text, repaired when the stream cut it (`ToolCall.cut_off` when the
        repair had to guess, so the call is not run; only missing closing brackets leave it runnable).
        Deltas that carried neither id, name nor arguments leave no call behind; arguments at an
        index that never opened a call are attributed or dropped (module docstring), each with a
        warning (with `trace` only when attributed); a call without a name is dropped with a warning.
        """
        events: list[Event] = []
        if tail := self._reasoning.flush():
            events.append(ReasoningDelta(tail))
        if (held := self._leaks.flush()) and (shown := self._text.add(held)):
            self._think.split(shown, events)
        if self._leaks.dropped:
            self._fired("template-tags-in-content")
        if tail := self._text.flush():
            self._think.split(tail, events)
        self._think.flush(events)
        self._refusal.flush()
        calls: list[ToolCall] = []
        for partial in self._named_calls(events):
            if partial.custom:  # never offered, never run: answered by the orchestrator, sent back as a function
                if not partial.id:
                    events.append(WarningEvent(f"custom tool call {partial.name}: crow offers no custom tools, and "
                                               "the call has no id to answer; dropped, neither run nor sent back"))
                    continue
                events.append(WarningEvent(f"custom tool call {partial.name} [{partial.id}]: crow offers no custom "
                                           "tools; answered without running it", partial.id))
                calls.append(ToolCall(id=clean_text(partial.id), name=clean_text(partial.name),
                                      arguments=json.dumps({"input": clean_text(partial.joined())}, ensure_ascii=False),
                                      index=len(calls), custom=True))
                continue
            arguments, problem, cut_off = repair_arguments(partial.joined())
            if problem:
                label = f"tool call {partial.name} [{partial.id or 'no id'}]"
                events.append(WarningEvent(f"{label}: {problem}", partial.id))
                self._fired("arguments-repaired" if not cut_off else "arguments-cut")
            # a lone UTF-16 surrogate half (a gateway cut "\\ud83e\\udd85" apart) can be neither stored nor
            # sent: it becomes U+FFFD, in ids too; anything else the server gave is kept as it came
            calls.append(ToolCall(id=clean_text(partial.id), name=clean_text(partial.name), arguments=arguments,
                                  index=len(calls), cut_off=cut_off, extra=clean_json(partial.extra) or None,
                                  function_extra=clean_json(partial.fn_extra) or None))
        reason = self._finish_reason
        if reason is None:
            self._fired("finish-missing")
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
                value = {sub: [b.value() for b in v.blocks] if isinstance(v, _Blocks) else v
                         for sub, v in self._nested[key].items()}
            fields.setdefault(key, clean_json(value))
        content, reasoning = self._text.value(), self._reasoning.value()
        if reasoning and reason == "stop" and not (content or calls or self._refusal.value()):
            # vLLM's reasoning parser for Nemotron files the whole answer as reasoning (content null, finish_reason
            # stop): it is the answer, shown and kept as content, and not sent back as reasoning too
            self._fired("answer-in-reasoning")
            events += [WarningEvent("the answer came only in the server's reasoning field (content was empty): "
                                    "shown and kept as the answer"), TextDelta(reasoning)]
            content, reasoning = reasoning, None
            for name in (*self._fields, *self._blocks):
                fields.pop(name, None)
        turn = AssistantTurn(
            content=content,
            reasoning=reasoning,
            tool_calls=calls,
            finish_reason="tool_calls" if calls else (reason or "stop"),
            usage=self._usage,
            timings=self._timings,
            refusal=self._refusal.value(),
            fields=fields,
            rules=list(self._rules),
            parts=clean_json(self._parts.value()) if self._parts is not None else None,  # halves re-paired
        )
        if turn.refusal:
            events.append(WarningEvent(f"the model refused: {turn.refusal}"))
        elif not (turn.content or calls):
            events.append(WarningEvent("the model returned an empty answer"))
        what = "tool call arguments may be incomplete" if calls else "the answer may be incomplete"
        if reason == "length":
            events.append(WarningEvent(f"the model hit its token limit (finish_reason: length); {what}"))
        elif reason == "content_filter" and calls:  # a text turn so stopped ends the run (loop: ContentFiltered)
            events.append(WarningEvent(f"the server's content filter stopped the answer; {what}"))
        elif reason is None and not calls:
            events.append(WarningEvent(f"the stream ended without a finish_reason; {what}"))
        return turn, events
