"""Tool names with chat-template tokens leaked into them, mapped back to the registered tool.

Some served models leak control tokens of their chat template into the function name of a streamed
tool call: `lookup_order<|channel|>commentary` (gpt-oss / Harmony), `read_file<|constrain|>json`,
`read_file ` with trailing whitespace, or the `functions.` namespace prefix of Kimi K2 and Harmony
(`functions.read_file`). A name that is not a registered tool but becomes one when trimmed of
whitespace, cut at its first `<|`, and/or stripped of a leading `functions.` is taken as that tool:
it runs, and the clean name is what the history sends back. Any other unknown name is left as it is
(dispatch answers it with the usual unknown-tool error). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import replace

from ..events import WarningEvent
from ..history import AssistantTurn

__all__ = ["ToolNameCleaner", "clean_tool_name"]

_TOKEN = "<|"
_NAMESPACE = "functions."


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
        known: the registered tool names.
        trace: warn on every cleaned name, not only the first of the run (for `--debug`).
    """

    def __init__(self, known: Iterable[str], *, trace: bool = False) -> None:
        self._known = frozenset(known)
        self._trace = trace
        self._warned = False

    def clean(self, turn: AssistantTurn) -> list[WarningEvent]:
        """Replace leaked names in `turn.tool_calls` (in place, new `ToolCall`s); return the warnings."""
        events: list[WarningEvent] = []
        calls = list(turn.tool_calls)
        for n, call in enumerate(calls):
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
