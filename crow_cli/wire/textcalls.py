"""Tool calls a server's parser missed: complete call blocks at the end of a turn's text (pure, no I/O).

Open models write their tool calls in their chat template's own markup, and a server whose parser does not
know it (or a template that does not match the model) passes it on as text: Qwen's `<tool_call>` printed
instead of run (block/goose#3748, sst/opencode#1034). `recover_calls` reads the formats known from open models
(hermes, mistral, llama3, harmony, bare json), and only from a text that is nothing but calls after a short
lead-in: anything that could be prose quoting a call stays text, never run.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_LEAD_IN", "Recovered", "recover_calls"]

MAX_LEAD_IN = 400
"""Characters of plain text a recovered turn may have before its blocks."""

_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_MISTRAL = "[TOOL_CALLS]"
_MISTRAL_ARGS = re.compile(r"\[TOOL_CALLS\]\s*([A-Za-z0-9_.:-]+)\s*\[ARGS\]")
_PYTHON_TAG = "<|python_tag|>"
_LLAMA_END = re.compile(r"\s*(<\|eom_id\|>|<\|eot_id\|>)?\s*$")
_HARMONY = re.compile(r"(?:<\|start\|>assistant)?<\|channel\|>commentary\s+to=(?:functions\.)?([A-Za-z0-9_.:-]+)"
                      r"[^<]*(?:<\|constrain\|>\s*json\s*)?<\|message\|>", re.DOTALL)
_HARMONY_END = re.compile(r"\s*(<\|call\|>|<\|end\|>)?")
_THINK = re.compile(r"\s*<think>.*?</think>", re.DOTALL)
_HARMONY_ANALYSIS = re.compile(r"^\s*(?:<\|start\|>assistant)?<\|channel\|>analysis<\|message\|>.*?(?:<\|end\|>)?"
                               r"(?=(?:<\|start\|>assistant)?<\|channel\|>commentary)", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Recovered:
    """The calls read from a turn's text."""

    lead_in: str
    """The plain text before the blocks (stripped; "" when none): the turn's content."""
    calls: tuple[tuple[str, str], ...]
    """(tool name as offered, arguments as JSON text of an object), in order."""
    format: str
    """Which markup: hermes | mistral | llama3 | harmony | json."""
    raw: str
    """The text of the blocks, as the model wrote them (kept aside, never sent back as text)."""


def recover_calls(content: str | None, offered: Collection[str],
                  name_of: Callable[[str], str] | None = None, *, tags_dropped: bool = False) -> Recovered | None:
    """The tool calls complete blocks at the end of `content` stand for, or None (see the module).

    The formats:

    - `hermes`: Hermes / Qwen `<tool_call>{"name": …, "arguments": {…}}</tool_call>`, one or more;
    - `mistral`: `[TOOL_CALLS][{"name": …, "arguments": {…}}, …]`, or the newer `[TOOL_CALLS]name[ARGS]{…}`;
    - `llama3`: `<|python_tag|>{"name": …, "parameters": {…}}` (several joined by `;`), an end token after it;
    - `harmony`: gpt-oss's channel leak, `<|channel|>commentary to=functions.NAME … <|message|>{…}<|call|>`,
      after an `analysis` channel (its reasoning, set aside) or not, `json` glued to the name or not;
    - `json`: bare JSON objects `{"name": …, "arguments": {…}}` (or `"parameters"`), one after another, or a
      JSON array of them (Mistral Large answering with the list as text).

    Only a text that is nothing but an optional `<think>` block (a model's reasoning the server left in the text:
    set aside, kept in the lead-in), an optional plain lead-in ("I'll check that order.") and then complete
    blocks naming offered tools, each with an object of arguments, is read as calls. A block followed by more
    text, inside a code fence, after a lead-in that quotes (backticks) or runs long, bare JSON on a lead-in's
    line (prose quoting it), or naming a tool not offered is never run: it stays text. A marked block (hermes,
    mistral, llama3, harmony) may follow its lead-in on the same line.

    Args:
        content: the turn's text, its reasoning set aside.
        offered: the names of the tools offered in the request.
        name_of: maps a written name to the offered one it stands for (a leaked prefix, another case), or
            returns it unchanged; None: names must match exactly.
        tags_dropped: the accumulator dropped template tags from the text (its `template-tags-in-content`
            rule): bare JSON calls were Hermes blocks, and their format is named so.
    """
    if not content or not offered:
        return None
    text = _HARMONY_ANALYSIS.sub("", content.rstrip(), count=1)  # gpt-oss's reasoning, set aside
    for reader in (_hermes, _mistral, _llama3, _harmony, _bare_json):
        found = reader(text)
        if found is None:
            continue
        start, fmt, entries = found
        lead_in = text[:start].strip()
        thought = _THINK.match(text[:start])  # a model's <think> block the server left in the text: set aside
        said = text[thought.end() if thought else 0:start].strip()
        line = text[text.rfind("\n", 0, start) + 1:start]  # the blocks' line, before them
        indented = not line.strip() and ("\t" in line or len(line) >= 4)
        if not _plain(said) or (said and indented) or (fmt == "json" and line.strip()):
            # an indented line after a lead-in is a Markdown code block, bare JSON after words on its line is
            # prose quoting it: shown, not called
            return None
        calls = []
        for entry in entries:
            call = _call(entry, offered, name_of)
            if call is None:
                return None
            calls.append(call)
        if calls:
            return Recovered(lead_in, tuple(calls), "hermes" if fmt == "json" and tags_dropped else fmt,
                             text[start:])
        return None
    return None


def _plain(lead_in: str) -> bool:
    """A lead-in that is a sentence or two, not code or a quotation of markup."""
    return len(lead_in) <= MAX_LEAD_IN and "```" not in lead_in and "`" not in lead_in[-3:] \
        and not any(marker in lead_in for marker in ("<tool_call>", _MISTRAL, _PYTHON_TAG, "<|channel|>", "{"))


def _call(entry: Any, offered: Collection[str], name_of: Callable[[str], str] | None) -> tuple[str, str] | None:
    if not isinstance(entry, dict):
        return None
    name = entry.get("name")
    arguments = entry.get("arguments", entry.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            return None
    if not isinstance(name, str) or not isinstance(arguments, dict):
        return None
    for written in (name, name.removesuffix("json")):  # gpt-oss glues its `json` constraint to the name
        known = name_of(written) if name_of is not None else written
        if known in offered:
            return known, json.dumps(arguments, ensure_ascii=False)
    return None


def _object_at(text: str, at: int) -> tuple[Any, int] | None:
    """The JSON value starting at `at` (whitespace skipped) and the index after it, or None."""
    decoder = json.JSONDecoder()
    at = len(text) - len(text[at:].lstrip())
    try:
        return decoder.raw_decode(text, at)
    except (ValueError, RecursionError):
        return None


def _hermes(text: str) -> tuple[int, str, list[Any]] | None:
    blocks = list(_HERMES.finditer(text))
    if not blocks or blocks[-1].end() != len(text):
        return None
    for before, after in itertools.pairwise(blocks):
        if text[before.end():after.start()].strip():
            return None  # text between blocks: prose about calls, not calls
    entries = []
    for block in blocks:
        parsed = _object_at(block.group(1), 0)
        if parsed is None or block.group(1)[parsed[1]:].strip():
            return None
        entries.append(parsed[0])
    return blocks[0].start(), "hermes", entries


def _mistral(text: str) -> tuple[int, str, list[Any]] | None:
    start = text.find(_MISTRAL)
    if start < 0:
        return None
    named = list(_MISTRAL_ARGS.finditer(text, start))
    if named and named[0].start() == start:
        entries, at = [], start
        for match in named:
            if text[at:match.start()].strip():
                return None
            parsed = _object_at(text, match.end())
            if parsed is None:
                return None
            entries.append({"name": match.group(1), "arguments": parsed[0]})
            at = parsed[1]
        return (start, "mistral", entries) if not text[at:].strip() else None
    parsed = _object_at(text, start + len(_MISTRAL))
    if parsed is None or text[parsed[1]:].strip():
        return None
    value = parsed[0]
    return start, "mistral", value if isinstance(value, list) else [value]


def _llama3(text: str) -> tuple[int, str, list[Any]] | None:
    start = text.find(_PYTHON_TAG)
    if start < 0:
        return None
    body = _LLAMA_END.sub("", text[start + len(_PYTHON_TAG):])
    entries, at = [], 0
    while True:
        parsed = _object_at(body, at)
        if parsed is None:
            return None
        entries.append(parsed[0])
        rest = body[parsed[1]:].lstrip()
        if not rest:
            return start, "llama3", entries
        if not rest.startswith(";"):
            return None
        at = len(body) - len(rest) + 1


def _harmony(text: str) -> tuple[int, str, list[Any]] | None:
    heads = list(_HARMONY.finditer(text))
    if not heads:
        return None
    entries, at = [], heads[0].start()
    for head in heads:
        if text[at:head.start()].strip():
            return None
        parsed = _object_at(text, head.end())
        if parsed is None:
            return None
        entries.append({"name": head.group(1), "arguments": parsed[0]})
        end = _HARMONY_END.match(text, parsed[1])
        at = end.end() if end else parsed[1]
    return (heads[0].start(), "harmony", entries) if not text[at:].strip() else None


def _bare_json(text: str) -> tuple[int, str, list[Any]] | None:
    """JSON call objects, the first at a line's start, nothing but whitespace between them and after the last
    (also what is left of Hermes blocks whose tags the accumulator dropped), or one JSON array of them."""
    if not text.endswith(("}", "]")):
        return None
    for line_start in (m.start(1) for m in re.finditer(r"(?:^|\n)[ \t]*([\[{])", text)):
        entries: list[Any] = []
        at = line_start
        while (parsed := _object_at(text, at)) is not None:
            value, at = parsed
            values = value if isinstance(value, list) and not entries else [value]
            if not values or not all(_looks_like_call(v) for v in values):
                return None
            entries += values
            if at == len(text):
                return line_start, "json", entries
            if isinstance(value, list) or (not text[at:at + 1].isspace() and text[at:at + 1] != "{"):
                break
        if entries:
            return None  # call objects followed by more text
    return None


def _looks_like_call(value: Any) -> bool:
    return isinstance(value, dict) and "name" in value and ("arguments" in value or "parameters" in value)
