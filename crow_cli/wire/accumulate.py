"""The streamed turn's accumulator: Chat Completions chunk dicts in, typed events and one `AssistantTurn` out.

It reads each chunk's choice and hands its parts on: text to `pieces` (surrogates paired, leaked template tags
dropped, a leading `<think>` block shown as reasoning), tool-call deltas to `calls.ToolCalls`, reasoning and
any other attached key to `reasoning.Attached`. `AssistantTurn.rules` names each rule that fired, in order
(`crow probe` reports them). Which server sends which shape, rule by rule: docs/streaming.md, beside the cases
in `tests/cases/`. Pure: no I/O, no printing, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..events import Event, Notice, ReasoningDelta, TextDelta, WarningEvent
from ..history import AssistantTurn
from ..text import clean_json
from .calls import ToolCalls
from .errors import stream_error
from .pieces import LeakFilter, TextBuffer, ThinkSplit
from .profiles import REASONING_FIELDS
from .reasoning import DELTA_KEYS, Attached, Parts

__all__ = ["StreamAccumulator"]


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
        self._rules: dict[str, None] = {}
        self._calls = ToolCalls(self._fired, self._rules, trace=trace)
        self._text = TextBuffer()
        self._think = ThinkSplit()
        self._leaks = LeakFilter()
        self._reasoning = TextBuffer()  # what is shown: per delta, its first reasoning source
        self._attached = Attached(reasoning_fields, self._reasoning, self._fired)
        self._refusal = TextBuffer()
        self._parts: Parts | None = None  # content sent as typed parts beside text (Mistral thinking)
        self._finish_reason: str | None = None
        self._usage: dict[str, Any] | None = None
        self._timings: dict[str, Any] | None = None
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
            if not DELTA_KEYS.issuperset(delta):
                self._attached.add(delta, events)
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
                    self._calls.several(tool_calls)
                for position, tc in enumerate(tool_calls):
                    if isinstance(tc, Mapping):
                        self._calls.add(tc, position, len(tool_calls), events)
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
        return type(args) is str and self._calls.fragment_of_open(key, args)

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
                self._parts = Parts((self._text.value() or "") + "".join(texts))  # text so far, this delta's too
                self._fired("content-parts", events, f"the content arrives in typed parts ({kind!r}): kept as "
                            "parts, in order, and sent back so")
            if (thought := self._parts.add(part)) and (shown := self._reasoning.add(thought)):
                events.append(ReasoningDelta(shown))
        return "".join(texts)

    def calls_seen(self) -> list[tuple[int, str, tuple[str, ...], bool]]:
        """Every call the stream opened, named or not, in opening order: its index key, its name, its
        argument fragments as kept, and whether they came interleaved with another call's (`crow probe`)."""
        return self._calls.seen()

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
        calls = self._calls.finish(events)
        reason = self._finish_reason
        if reason is None:
            self._fired("finish-missing")
        fields = self._attached.fields()
        content, reasoning = self._text.value(), self._reasoning.value()
        if reasoning and reason == "stop" and not (content or calls or self._refusal.value()):
            # vLLM's reasoning parser for Nemotron files the whole answer as reasoning (content null, finish_reason
            # stop): it is the answer, shown and kept as content, and not sent back as reasoning too
            self._fired("answer-in-reasoning")
            events += [WarningEvent("the answer came only in the server's reasoning field (content was empty): "
                                    "shown and kept as the answer"), TextDelta(reasoning)]
            content, reasoning = reasoning, None
            for name in self._attached.reasoning_keys():
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
