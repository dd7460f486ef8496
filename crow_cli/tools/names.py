"""Tool names as the wire carries them, and names with chat-template tokens leaked into them, mapped back.

Wire names: OpenAI, DeepSeek, Groq, Anthropic-compatible endpoints and most others refuse a function
name outside `^[a-zA-Z0-9_-]{1,64}$` (OpenAI: "Invalid 'tools[0].function.name': string does not match
pattern"). A tool from any source (built-in, plugin, MCP) whose name is outside it is offered under
`wire_name(name)` (every other character becomes `_`, cut to 64), made unique by the registry; the model
calls it by that name, the history stores that name (so the model sees the names it was offered, and
servers that check the names in `messages` accept them), and the registry maps it back to the tool.

Some served models leak control tokens of their chat template into the function name of a streamed
tool call: `lookup_order<|channel|>commentary` (gpt-oss / Harmony), `read_file<|constrain|>json`,
`read_file ` with trailing whitespace, or the `functions.` namespace prefix of Kimi K2 and Harmony
(`functions.read_file`). A name that is not a registered tool but becomes one when trimmed of
whitespace, cut at its first `<|`, and/or stripped of a leading `functions.` is taken as that tool:
it runs, and the clean name is what the history sends back. Any other unknown name is left as it is
(dispatch answers it with the usual unknown-tool error). Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import replace

from ..events import WarningEvent
from ..history import AssistantTurn
from ..wire.profiles import LEAKED_TOKEN, TOOL_NAMESPACE

__all__ = ["WIRE_NAME", "ToolNameCleaner", "clean_tool_name", "wire_name"]

WIRE_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""The function names every OpenAI-compatible server takes (matched in full)."""
_OUTSIDE = re.compile(r"[^A-Za-z0-9_-]")
_TOKEN = LEAKED_TOKEN
_NAMESPACE = TOOL_NAMESPACE


def wire_name(name: str) -> str:
    """`name` as servers take it: every character outside `[A-Za-z0-9_-]` replaced by `_`, cut to 64
    characters (`"tool"` for an empty name). A name that is already fine is returned as it is."""
    return _OUTSIDE.sub("_", name)[:64] or "tool"


def clean_tool_name(name: str, known: Collection[str]) -> tuple[str, bool]:
    """The registered tool a streamed function name stands for.

    Args:
        name: the function name as the stream assembled it.
        known: the registered tool names.

    Returns:
        `(name, False)` when `name` is registered or no cleaning gives a registered name; else
        `(clean, True)`: the first registered name among `name` trimmed of whitespace, cut before its
        first `<|` (then trimmed), and either of those without a leading `functions.`.
    """
    if name in known:
        return name, False
    trimmed = name.strip()
    cut = name.split(_TOKEN, 1)[0].strip()
    for candidate in (trimmed, cut, trimmed.removeprefix(_NAMESPACE), cut.removeprefix(_NAMESPACE)):
        if candidate and candidate in known:
            return candidate, True
    return name, False


class ToolNameCleaner:
    """Applies `clean_tool_name` to each assembled turn of one run, warning once per run.

    Args:
        known: the tool names the model was offered (wire names).
        trace: warn on every cleaned name, not only the first of the run (for `--debug`).
        aliases: registered names whose wire name differs, mapped to it: a call by the registered name
            (`my.tool`) is stored under the name the model was offered (`my_tool`), silently.
    """

    def __init__(self, known: Iterable[str], *, trace: bool = False, aliases: Mapping[str, str] | None = None
                 ) -> None:
        self._aliases = dict(aliases or {})
        self._known = frozenset(known)
        self._trace = trace
        self._warned = False

    def clean(self, turn: AssistantTurn) -> list[WarningEvent]:
        """Replace leaked names in `turn.tool_calls` (in place, new `ToolCall`s); return the warnings."""
        events: list[WarningEvent] = []
        calls = list(turn.tool_calls)
        for n, call in enumerate(calls):
            if call.name in self._aliases and call.name not in self._known:
                calls[n] = replace(call, name=self._aliases[call.name])
                continue
            clean, changed = clean_tool_name(call.name, self._known)
            if not changed:
                continue
            calls[n] = replace(call, name=clean)
            if self._trace or not self._warned:
                later = "" if self._trace else "; other such names in this run are cleaned without a warning"
                events.append(WarningEvent(f"tool call [{call.id or 'no id'}]: the name {call.name!r} is not a tool; "
                                           f"ran {clean!r} (the server leaked template tokens or spaces into the "
                                           f"name){later}", call.id))
                self._warned = True
        turn.tool_calls = calls
        return events
