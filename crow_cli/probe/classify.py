"""Name the shape of one streamed Chat Completions response: a pure function of the raw SSE text.

`parse_sse` turns a response body (`text/event-stream`) into a `RawStream`: the decoded `data:` events,
the comment lines, whether `[DONE]` came and the line endings. `classify` feeds the stream to crow's own
accumulator (`wire.accumulate`: the calls, and the rules it names as they fire, are what a run would
see; there is no second keying here) and names every quirk of the stream that crow's conformance corpus
knows (`tests/cases/*.json`; reference: `shared/reference/streaming-tool-calls.md`), each as a `Finding`
with a stable code, a short label, what was seen and what crow does about it. No I/O, no clock:
replaying a corpus case's stream names that case's quirk, which is how every classification is tested.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
from httpx_sse import EventSource, SSEError

from ..errors import ServerError
from ..history import AssistantTurn, ToolCall
from ..wire.accumulate import StreamAccumulator
from ..wire.profiles import REASONING_BLOCK_FIELDS
from ..wire.stream import recover_frames

__all__ = ["Finding", "RawStream", "Shape", "classify", "parse_sse"]

Level = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class RawStream:
    """One response body as streamed.

    Attributes:
        chunks: every `data:` event that decoded to a JSON object, in order.
        comments: SSE comment lines (`: …`), without the colon.
        done: a `data: [DONE]` event came.
        crlf: lines ended with `\\r\\n` (sse-starlette's default).
        bad_events: `data:` payloads that were not JSON objects (shortened).
    """

    chunks: list[dict[str, Any]] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)
    done: bool = False
    crlf: bool = False
    bad_events: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Finding:
    """One named trait of a stream.

    Attributes:
        code: stable identifier (`index-always-0`), used by `--json` and the tests.
        label: a few words for the report (`index always 0`).
        level: `ok` (nothing to work around), `warn` (a quirk crow handles) or `fail` (data lost or cut).
        seen: what the stream did, in one sentence.
        crow: what crow does about it.
    """

    code: str
    label: str
    level: Level
    seen: str
    crow: str


@dataclass(frozen=True)
class Shape:
    """The classification of one stream: its findings, plus what crow assembled from it."""

    findings: list[Finding]
    calls: list[ToolCall]
    content: str | None
    reasoning: str | None
    finish_reason: str | None
    """The last `finish_reason` the server sent (None: never sent)."""
    usage: dict[str, Any] | None
    error: str | None
    """The message of an in-stream error object, when one came."""
    rules: tuple[str, ...] = ()
    """The accumulator rules that fired on the stream (`AssistantTurn.rules`)."""

    def codes(self) -> list[str]:
        """The finding codes, in report order."""
        return [f.code for f in self.findings]


def parse_sse(text: str) -> RawStream:
    """Decode an SSE body (any of `\\n`, `\\r\\n`, `\\r` line endings) with httpx-sse.

    Never raises: payloads that are not JSON objects land in `bad_events`.
    """
    response = httpx.Response(200, headers={"content-type": "text/event-stream"}, content=text.encode("utf-8"))
    chunks: list[dict[str, Any]] = []
    bad: list[str] = []
    done = False
    try:
        for event in EventSource(response).iter_sse():
            data = event.data.strip()
            if not data:
                continue
            if data == "[DONE]":
                done = True
                continue
            try:
                value = json.loads(data)
            except (ValueError, RecursionError):
                value = None
            if isinstance(value, dict):
                chunks.append(value)
            else:  # damaged: the frames crow's client recovers from it still count, as they do in a run
                bad.append(data[:80])
                chunks.extend(recover_frames(data))
    except SSEError:  # not reachable with the header set above; kept for a changed library
        pass
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    comments = [line[1:].strip() for line in lines if line.startswith(":")]
    return RawStream(chunks=chunks, comments=comments, done=done, crlf="\r\n" in text, bad_events=bad)


@dataclass
class _Entry:
    """One `tool_calls[]` entry of one delta, where it sat."""

    chunk: int
    position: int
    count: int
    value: Mapping[str, Any]


def _choice(chunk: Mapping[str, Any]) -> Mapping[str, Any] | None:
    choices = chunk.get("choices")
    if not isinstance(choices, list):
        return None
    for choice in choices:
        if isinstance(choice, Mapping) and choice.get("index") in (0, None):
            return choice
    return None


def _entries(chunks: list[dict[str, Any]]) -> Iterator[_Entry]:
    for n, chunk in enumerate(chunks):
        choice = _choice(chunk)
        delta = choice.get("delta") if choice else None
        if not isinstance(delta, Mapping):
            continue
        calls = delta.get("tool_calls")
        if isinstance(calls, Mapping):
            calls = [calls]
        if isinstance(calls, list):
            for position, value in enumerate(calls):
                if isinstance(value, Mapping):
                    yield _Entry(n, position, len(calls), value)


def _valid_json(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def _repeats(joined: str) -> bool:
    """`joined` is some JSON text followed by a copy of itself (vLLM xLAM's finalize step)."""
    half, odd = divmod(len(joined), 2)
    return not odd and half > 1 and joined[:half] == joined[half:] and _valid_json(joined[:half])


_REMEDY_ACC = "the accumulator assembles it (corpus case)"


def classify(stream: RawStream) -> Shape:
    """Every finding for `stream`, in a fixed order: SSE framing, chunk envelope, ids, index, names,
    arguments, text and reasoning, finish_reason. Pure: the same stream gives the same shape."""
    out: list[Finding] = []

    def add(code: str, label: str, level: Level, seen: str, crow: str) -> None:
        out.append(Finding(code, label, level, seen, crow))

    chunks = stream.chunks
    # --- SSE framing
    if stream.comments:
        add("sse-comments", "SSE comments", "ok", f"{len(stream.comments)} comment line(s) (keep-alives, e.g. "
            f"{stream.comments[0][:30]!r})", "skips them")
    if stream.crlf:
        add("crlf", "CRLF line endings", "ok", "events end with \\r\\n\\r\\n", "the SSE parser accepts any line ending")
    if stream.bad_events:
        add("bad-event", "non-JSON data", "fail", f"a data: payload is not a JSON object ({stream.bad_events[0]!r})",
            "stops the turn with a server error")
    # --- envelope
    acc = StreamAccumulator()
    error: str | None = None
    for chunk in chunks:
        try:
            acc.feed(chunk)
        except ServerError as exc:
            error = str(exc)
            break
    streamed = acc.calls_seen()  # as the stream sent them, before orphan fragments are attributed
    turn, _ = acc.finish()
    if error:
        add("error-in-stream", "error event in the stream", "fail", f"an {{\"error\": …}} chunk: {error}",
            "reports it as a server error (exit 1), retrying when nothing was shown yet")
    first_choice = next((n for n, c in enumerate(chunks) if _choice(c) is not None), len(chunks))
    if any(c.get("choices") == [] for c in chunks[:first_choice]):
        add("empty-choices", "empty choices first", "ok", "a chunk with choices: [] before any choice "
            "(content-filter prelude)", "skips it")
    if any(c.get("choices") == [] and isinstance(c.get("usage"), Mapping) for c in chunks[first_choice:]):
        add("usage-only-chunk", "usage-only chunk", "ok", "usage arrives in a final chunk with choices: []",
            "reads the usage, skips the empty choices")
    if any((ch := _choice(c)) is not None and "delta" not in ch for c in chunks):
        add("choice-without-delta", "choice without delta", "ok", "a choice with no delta key (annotation)",
            "skips it")
    has_empty_array = any((ch := _choice(c)) is not None and isinstance(ch.get("delta"), Mapping)
                          and ch["delta"].get("tool_calls") == [] for c in chunks)
    entries = list(_entries(chunks))
    if has_empty_array:
        add("empty-tool-calls-array", "empty tool_calls arrays", "ok", "\"tool_calls\": [] on deltas",
            "treats an empty array as no call and keeps the text")
    # --- tool calls, as the accumulator keyed them (the rules it names say what each delta did)
    flags = set(turn.rules) & set(_TRAITS)
    calls = [{"key": key, "name": name, "fragments": list(fragments), "interleaved": interleaved}
             for key, name, fragments, interleaved in streamed]
    if any("<|" in str(c["name"]) or str(c["name"]) != str(c["name"]).strip() for c in calls):
        flags.add("name-leaked-tokens")
    if calls:
        _call_findings(add, calls, turn.tool_calls, entries)
    for code, (label, level, seen, crow) in _TRAITS.items():
        if code in flags:
            add(code, label, level, seen, crow)
    if calls:
        _argument_findings(add, calls, turn.tool_calls, "arguments-repeated" in turn.rules)
    # --- text and reasoning
    _text_findings(add, chunks, entries)
    _attached_findings(add, turn)
    # --- finish_reason
    reasons = [str(ch["finish_reason"]) for c in chunks if (ch := _choice(c)) is not None and ch.get("finish_reason")]
    reason = reasons[-1] if reasons else None
    if reason is None:
        if not error:
            add("finish-missing", "finish_reason missing", "warn", "no chunk carried a finish_reason",
                "runs the assembled calls anyway; a text answer gets a warning that it may be incomplete")
    elif calls and reason == "tool_calls":
        add("finish-tool-calls", "finish_reason tool_calls", "ok", "finish_reason: tool_calls", "runs the calls")
    elif calls and reason in ("stop", "end_turn", "eos"):
        add("finish-stop-after-calls", f"finish_reason {reason} after calls", "warn",
            f"finish_reason {reason!r} although calls were streamed", "runs the calls: a turn with calls is a "
            "tool turn whatever finish_reason says")
    elif reason == "length":
        add("finish-length", "finish_reason length", "warn", "the token cap cut the answer",
            "warns that the answer (or the arguments) may be incomplete")
    elif not calls and reason == "tool_calls":
        add("finish-tool-calls-without-calls", "finish_reason tool_calls, no calls", "warn",
            "finish_reason tool_calls but no call was streamed", "treats the turn as a text answer")
    else:
        add("finish-" + reason.replace("_", "-"), f"finish_reason {reason}", "ok", f"finish_reason: {reason}",
            "ends the turn")
    if not stream.done:
        add("done-missing", "[DONE] missing", "warn" if reason else "fail", "the stream ended without data: [DONE]",
            "ends the turn at the end of the body; a cut call is not run (its result asks for it again)")
    return Shape(findings=out, calls=list(turn.tool_calls), content=turn.content, reasoning=turn.reasoning,
                 finish_reason=reason, usage=turn.usage, error=error, rules=tuple(turn.rules))


_TRAITS: dict[str, tuple[str, Level, str, str]] = {
    # code: (label, level, seen, what crow does), in report order
    "ids-empty-on-continuation": ("ids empty on continuation", "warn", 'continuation deltas carry "id": ""',
                                  "keeps the first non-empty id; an empty one never starts a call"),
    "ids-repeated": ("ids repeated", "ok", "a later delta of the same call re-sends its id",
                     "an identical id continues the open call"),
    "ids-fresh-on-fragments": ("new id on every fragment", "warn", "argument fragments of one call carry new ids",
                               "a fresh id without a name continues the open call; the first id is kept"),
    "name-repeated": ("name repeated", "ok", "a later delta re-sends the call's name",
                      "an identical repeat is ignored, not appended"),
    "name-split": ("name split", "ok", "the function name arrives in pieces", "joins the pieces"),
    "name-leaked-tokens": ("template tokens in a name", "warn", "a function name carries chat-template tokens "
                           "(`<|…|>`) or whitespace", "runs the tool the cleaned name names, and sends it back clean"),
    "name-after-arguments": ("name after arguments", "warn", "the name arrives after argument text",
                             "keeps the arguments and takes the later name"),
    "same-index-twice": ("one index twice in a delta", "warn", "a delta holds two entries for the same index "
                         "(header and fragment, or two fragments)", "appends them in order"),
    "calls-in-one-delta": ("several calls in one delta", "ok", "one delta holds several whole calls",
                           "takes each entry as its own call"),
    "empty-function-delta": ("empty function delta", "ok", "a tool_calls entry with neither name nor arguments",
                             "ignores it"),
    "arguments-object": ("arguments object-valued", "warn", "function.arguments is a JSON object, not a string "
                         "(MiniMax)", "serialises it to JSON text"),
    "lone-surrogates": ("emoji split in halves", "warn", "a fragment ends or starts with half of a UTF-16 "
                        "surrogate pair", "pairs the halves across fragments (U+FFFD when one never comes)"),
}
"""Traits seen delta by delta in `classify`'s walk over the tool-call entries."""


def _call_findings(add: Any, calls: list[dict[str, Any]], assembled: list[ToolCall], entries: list[_Entry]) -> None:
    indexes = [e.value.get("index") for e in entries]
    ints = [i for i in indexes if isinstance(i, int) and not isinstance(i, bool)]
    if not ints:
        add("index-missing", "index missing", "warn", "tool_calls entries carry no index",
            "keys by position in the delta, else by the latest call")
    elif len(ints) < len(indexes):
        add("index-sometimes-missing", "index sometimes missing", "warn", "some tool_calls entries carry no index",
            "keys those by the latest call")
    if ints and min(ints) > 0:
        add("index-starts-at-1", f"index starts at {min(ints)}", "warn", f"the first call has index {min(ints)}, "
            "no index 0 ever came", "keys calls by index, whatever number it starts at")
    if ints and len(calls) > 1 and len({c["key"] for c in calls}) == 1:
        add("index-always-0", f"index always {ints[0]}", "warn", f"{len(calls)} calls all at index {ints[0]}, each "
            "with its own id", "a fresh id with a name starts a new call once the open call's arguments are "
            "complete")
    elif len(calls) > 1 and len({c["key"] for c in calls}) < len(calls):
        add("index-reused", "index reused", "warn", "two calls share an index", "a fresh id with a name starts a "
            "new call")
    if len(calls) > 1 and any(c["interleaved"] for c in calls):
        add("calls-interleaved", "calls interleaved", "ok", "fragments of parallel calls alternate",
            "assembles each call by its index")
    no_id = [c for c in assembled if not c.id]
    if no_id and not all(not c.id for c in assembled):
        add("id-missing", "a call without id", "warn", f"{len(no_id)} of {len(assembled)} calls came with no id "
            "(null)", "sends the result back with tool_call_id \"\" (ids are never invented)")
    elif no_id:
        add("ids-missing", "no ids", "warn", "no call carried an id", "sends results back with tool_call_id \"\" "
            "(ids are never invented)")
    if len({c.id for c in assembled if c.id}) < len([c for c in assembled if c.id]):
        add("ids-reused", "ids reused", "warn", "two calls share one id", "answers each call in call order")
    if any(e.value.get("type") == "" for e in entries):
        add("type-empty", "type empty", "ok", "\"type\": \"\" on tool_calls entries", "ignores type")
    elif not any("type" in e.value for e in entries):
        add("type-missing", "type missing", "ok", "tool_calls entries carry no type", "ignores type")


def _argument_findings(add: Any, calls: list[dict[str, Any]], assembled: list[ToolCall], repeated: bool) -> None:
    """`repeated`: the accumulator dropped a fragment that repeated a call's complete arguments."""
    fragments = [len([f for f in c["fragments"] if f]) for c in calls]
    if all(n <= 1 for n in fragments):
        add("arguments-whole", "arguments whole", "ok", "each call's arguments arrive in one piece",
            "takes them as they are")
    else:
        add("arguments-fragmented", "arguments fragmented", "ok", f"arguments in up to {max(fragments)} fragments",
            "joins the fragments")
    if repeated:
        add("arguments-repeated", "arguments repeated", "warn", "the final fragment repeats the whole arguments",
            "drops a fragment that repeats the complete arguments")
        return
    for c in calls:
        parts = [f for f in c["fragments"] if f]
        joined = "".join(parts)
        if _repeats(joined) or (len(parts) > 1 and not _valid_json(joined) and _ends_with_repeat(joined)):
            add("arguments-repeated", "arguments repeated", "warn", "the whole arguments are sent again at the end",
                "drops the repeated copy")
            return
    if any(not "".join(c["fragments"]) for c in calls if c["name"]):
        add("arguments-empty", "arguments empty", "ok", "a call came with no argument text (a tool without "
            "parameters)", "sends \"{}\"")
    cut = [c for c in assembled if c.cut_off] or [
        c for c, raw in zip(assembled, calls, strict=False) if "".join(raw["fragments"])
        and not _valid_json("".join(raw["fragments"]))]
    if cut:
        add("arguments-cut", "arguments cut off", "fail", f"{cut[0].name or 'a call'}'s arguments are not complete "
            "JSON", "repairs missing closing brackets; a call cut mid-value is not run and its result asks for it "
            "again")
    if len(assembled) > 1 and len({(c.name, c.arguments) for c in assembled}) == 1:
        add("identical-calls", "identical parallel calls", "ok", f"{len(assembled)} calls with the same name and "
            "arguments", "runs every one (never de-duplicated)")


def _ends_with_repeat(joined: str) -> bool:
    """Complete JSON, then a second complete copy of it (`{…}{…}`)."""
    decoder = json.JSONDecoder()
    try:
        first, end = decoder.raw_decode(joined)
        second, end2 = decoder.raw_decode(joined[end:].lstrip())
    except (ValueError, RecursionError):
        return False
    return bool(first == second and joined[end:].lstrip()[end2:].strip() == "")


# accumulator rule -> the finding it makes: (code, label, level, seen, what crow does)
_RULE_FINDINGS: dict[str, tuple[str, str, Level, str, str]] = {
    "think-in-content": ("think-in-content", "<think> in content", "ok", "the content opens with a <think>…</think> "
                         "block", "shows it as reasoning and sends the content back exactly as it came"),
    "content-parts": ("content-parts", "thinking in content parts", "ok", "the content arrives as typed parts "
                      "(thinking chunks beside text)", "shows the thinking as reasoning and sends the content back "
                      "as the parts that came"),
    "tool-call-fields": ("tool-call-fields", "fields on tool calls", "ok", "tool calls carry keys beside id, type "
                         "and function (extra_content …)", "keeps them and sends them back on their call"),
    "choice-index-varies": ("choice-index-varies", "choice index counts up", "warn", "the one choice's index is "
                            "not 0 (changes from chunk to chunk)", "n is not set: assembles one answer, warns once"),
    "name-null-on-continuation": ("name-null", "name \"null\" on continuations", "warn", "continuation deltas "
                                  "carry function.name \"null\"", "reads it as no name"),
}


def _attached_findings(add: Any, turn: AssistantTurn) -> None:
    """What the accumulator kept beside content and calls (its `rules` and `fields`)."""
    for name in REASONING_BLOCK_FIELDS:
        blocks = turn.fields.get(name)
        if isinstance(blocks, list):
            merged = "reasoning-blocks-merged" in turn.rules
            add("reasoning-details", "reasoning blocks", "ok", f"{name}: {len(blocks)} block(s)"
                f"{', streamed in pieces' if merged else ''}", "merges pieces by index and type (signatures "
                "untouched) and sends the blocks back with the message")
    others = sorted(k for k in turn.fields if k not in REASONING_BLOCK_FIELDS and not k.startswith("reasoning"))
    if others:
        add("message-fields", "fields on the message", "ok", f"the deltas carry {', '.join(others)}",
            "keeps them and sends them back with the message")
    for rule in turn.rules:
        if rule in _RULE_FINDINGS:
            add(*_RULE_FINDINGS[rule])


def _text_findings(add: Any, chunks: list[dict[str, Any]], entries: list[_Entry]) -> None:
    first_call = min((e.chunk for e in entries), default=None)
    last_call = max((e.chunk for e in entries), default=None)
    text_at: list[int] = []
    reasoning: dict[str, list[int]] = {}
    for n, chunk in enumerate(chunks):
        choice = _choice(chunk)
        delta = choice.get("delta") if choice else None
        if not isinstance(delta, Mapping):
            continue
        if isinstance(delta.get("content"), str) and delta["content"]:
            text_at.append(n)
        for key in ("reasoning_content", "reasoning"):
            if isinstance(delta.get(key), str) and delta[key]:
                reasoning.setdefault(key, []).append(n)
    if first_call is not None and last_call is not None:
        if any(first_call < n < last_call and not any(e.chunk == n for e in entries) for n in text_at):
            add("text-between-calls", "text between tool calls", "warn", "a content delta arrives between "
                "two calls", "keeps the text apart and the calls whole")
        elif any(n < first_call for n in text_at):
            add("text-before-calls", "text before tool calls", "ok", "the answer starts with text, then calls",
                "shows the text and runs the calls")
    for key, where in reasoning.items():
        place = "" if first_call is None else " before the tool calls" if max(where) < first_call else \
            " around the tool calls"
        add(key, key, "ok", f"{key} deltas ({len(where)}){place}", "shows it apart from the answer, keeps it with "
            "the message under that name and sends it back as reasoning_echo says")
