"""Tool-call assembly: the tool-call deltas of one streamed turn in, `ToolCall`s in call order out.

Calls are keyed by the delta's `index` (a missing one: the position in a delta of several, else the latest
call); `id`, `type` and `function.name` keep their first non-empty value; a new id with a name at a used index
starts a new call once the open one's arguments are whole JSON; argument fragments are joined once at the end
(linear in bytes) and repaired when the stream cut them. Which server sends which shape: docs/streaming.md.
Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..events import Event, ToolCallDelta, ToolCallStarted, WarningEvent
from ..history import ToolCall
from ..text import clean_json, clean_text
from .pieces import HIGH_HALVES, LOW_HALVES, Fired, keep_first
from .repair import repair_arguments

__all__ = ["PartialCall", "ToolCalls", "merge_fragments"]

_CALL_KEYS = frozenset(("index", "id", "type", "function"))
_FN_KEYS = frozenset(("name", "arguments"))


@dataclass(slots=True)
class PartialCall:
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


def merge_fragments(target: PartialCall, others: list[PartialCall]) -> None:
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


class ToolCalls:
    """The calls of one turn being assembled from their deltas.

    Args:
        fired: notes a rule that fired (`pieces.Fired`).
        rules: the rules fired so far (read only: a note built once).
        trace: a `ToolCallDelta` for every raw tool-call delta, and a warning when orphan fragments are merged.
    """

    __slots__ = ("_by_key", "_calls", "_fired", "_headed", "_last_fed", "_latest_key", "_rules", "_run", "_trace")

    def __init__(self, fired: Fired, rules: Collection[str], *, trace: bool = False) -> None:
        self._fired = fired
        self._rules = rules
        self._trace = trace
        self._calls: list[PartialCall] = []
        self._by_key: dict[int, PartialCall] = {}
        self._headed = 0  # calls given a `seq` so far
        self._run = 0  # fragment runs so far (see `PartialCall.runs`)
        self._last_fed: PartialCall | None = None
        self._latest_key: int | None = None

    def fragment_of_open(self, key: int, args: str) -> bool:
        """The hot path: take `args`, one fragment for the open call at `key` (True); False when it is not
        plainly one (no call there yet, or possibly the whole arguments repeated): `add` decides."""
        call = self._by_key.get(key)
        if call is None or (args and call.length == len(args)):
            return False
        self._latest_key = key
        if args:
            self._fragment(call, args)
        return True

    def _fragment(self, call: PartialCall, args: str) -> None:
        """Append one non-empty argument fragment to `call` (its run noted for orphan merging)."""
        if args[-1] in HIGH_HALVES or args[0] in LOW_HALVES:
            self._fired("lone-surrogates")
        if call is not self._last_fed:
            self._run += 1
            call.runs.append((self._run, len(call.fragments)))
            self._last_fed = call
        call.fragments.append(args)
        call.length += len(args)

    def add(self, tc: Mapping[str, Any], position: int, count: int, events: list[Event]) -> None:
        """Take one tool-call delta, the `position`-th of `count` in its delta; a call named now is announced
        (a `ToolCallStarted` in `events`)."""
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
            call = PartialCall(key=key)
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
                    keep_first(call.extra, k, v)
            if "tool-call-fields" not in self._rules:  # its note is built once, not on every delta
                self._fired("tool-call-fields", events, f"tool call {call.name or key}: the server attached "
                            f"{sorted(k for k in tc if k not in _CALL_KEYS)} to it: kept and sent back with the call")
        if not _FN_KEYS.issuperset(fn):
            call.fn_extra = call.fn_extra or {}
            for k, v in fn.items():
                if k not in _FN_KEYS:
                    keep_first(call.fn_extra, k, v)
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

    def several(self, tool_calls: list[Any]) -> None:
        """Name a delta holding several entries: one index twice, or several named calls."""
        entries = [tc for tc in tool_calls if isinstance(tc, Mapping)]
        keys = [tc.get("index") for tc in entries if isinstance(tc.get("index"), int)]
        if len(set(keys)) < len(keys):
            self._fired("same-index-twice")
        named = [tc for tc in entries if isinstance(tc.get("function"), Mapping) and tc["function"].get("name")]
        if len(named) > 1:
            self._fired("calls-in-one-delta")

    def _continuation(self, call: PartialCall, raw_id: Any, name: str, raw_name: Any, args: Any) -> None:
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

    def seen(self) -> list[tuple[int, str, tuple[str, ...], bool]]:
        """Every call the stream opened, named or not, in opening order: its index key, its name, its
        argument fragments as kept, and whether they came interleaved with another call's (`crow probe`)."""
        return [(p.key, p.name, tuple(p.fragments), len(p.runs) > 1) for p in self._calls]

    @staticmethod
    def _starts_new_call(call: PartialCall, call_id: str, name: str) -> bool:
        if not (call_id and call.id and call_id != call.id):
            return False  # no id, or the same one re-sent (vLLM GLM): the open call goes on
        if not call.length:
            return True
        # Ollama: every whole call at index 0, each with its own id
        return call.fragments[-1].rstrip().endswith("}") and call.arguments_complete()

    @staticmethod
    def _repeats_whole(call: PartialCall, args: str) -> bool:
        # Joining only when the lengths match keeps this linear: the join costs no more than `args`.
        return call.length == len(args) and call.joined() == args and call.arguments_complete()

    def _named_calls(self, events: list[Event]) -> list[PartialCall]:
        """The calls to send back, in call order: orphan fragments attributed, nameless calls dropped."""
        headed = sorted((p for p in self._calls if p.seq >= 0), key=lambda p: p.seq)
        orphans = [p for p in self._calls if p.seq < 0 and p.length]
        if orphans:
            where = ", ".join(str(p.key) for p in orphans)
            open_calls = [p for p in headed if p.name and not (p.length and p.arguments_complete())]
            if len(open_calls) == 1:
                target = open_calls[0]
                merge_fragments(target, orphans)
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

    def finish(self, events: list[Event]) -> list[ToolCall]:
        """The calls to run and send back, in call order (see `StreamAccumulator.finish`); warnings in `events`."""
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
        return calls
