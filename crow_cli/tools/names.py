"""Tool calls whose names are not the names sent, given the tool's name sent, once per assembled turn.

The names themselves, both ways, are `wire.names.ToolNames`: the registry's (`ToolRegistry.names`) offers a
tool from any source (built-in, plugin, MCP) whose name servers refuse under a unique wire name; the history
stores that name (so the model sees the names it was offered, and servers that check the names in
`messages` accept them), and the registry maps it back to the tool.

Some served models leak control tokens of their chat template into the function name of a streamed
tool call: `lookup_order<|channel|>commentary` (gpt-oss / Harmony), `read_file<|constrain|>json`,
`read_file ` with trailing whitespace, or the `functions.` namespace prefix of Kimi K2 and Harmony
(`functions.read_file`). A name that is not a tool offered but becomes one when trimmed of whitespace,
cut at its first `<|`, and/or stripped of a leading `functions.` is taken as that tool: it runs, and the
clean name is what the history sends back. Any other unknown name is left as it is (dispatch answers it
with the usual unknown-tool error). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from ..events import WarningEvent
from ..history import AssistantTurn
from ..wire.names import ToolNames
from ..wire.profiles import LEAKED_TOKEN, TOOL_NAMESPACE

__all__ = ["ToolNameCleaner", "similar_names"]


def similar_names(name: str, names: Iterable[str], most: int = 3) -> list[str]:
    """The offered names closest to an unknown `name` (`read` → `read_file`), best first, at most `most`: those
    that contain it or that it contains (case aside), then difflib's close matches."""
    import difflib

    def plain(text: str) -> str:  # `ReadFile`, `read-file` and `read_file` read alike
        return "".join(c for c in text.lower() if c.isalnum())

    offered = list(names)
    key = plain(name)
    found = [n for n in offered if len(key) >= 3 and (key in plain(n) or plain(n) in key)]
    by_plain = {plain(n): n for n in offered}
    found += [by_plain[m] for m in difflib.get_close_matches(key, list(by_plain), n=most, cutoff=0.6)
              if by_plain[m] not in found]
    return found[:most]


def _how(written: str, clean: str) -> str:
    """How a cleaned name differed from the tool it ran, in words: a person told of leaked template tokens looks
    at the server's parser, one told of a prefix or a case difference at the model."""
    if LEAKED_TOKEN in written or written.strip() != written:
        return "the server leaked template tokens or spaces into the name"
    prefix = f" with the {TOOL_NAMESPACE} prefix" if written.startswith(TOOL_NAMESPACE) else ""
    if written.removeprefix(TOOL_NAMESPACE) == clean:
        return f"the model wrote it{prefix}"
    return f"the model wrote it{prefix}{' and' if prefix else ''} in another case"


class ToolNameCleaner:
    """Gives each assembled turn's tool calls the names sent they stand for (`ToolNames.called`), warning
    about leaked names once per run.

    Args:
        names: the names offered to the model: a `ToolNames` (a call by a tool's own name, `my.tool`, is
            stored under the name sent, `my_tool`, silently), or the names sent (as `ToolNames(names)`).
        trace: warn on every cleaned name, not only the first of the run (for `--debug`).
        by_case: a name that differs from one offered only in case is that tool (`clean_tool_name`).
    """

    def __init__(self, names: ToolNames | Iterable[str], *, trace: bool = False, by_case: bool = True) -> None:
        self._names = names if isinstance(names, ToolNames) else ToolNames(names)
        self._trace = trace
        self._by_case = by_case
        self._warned = False

    def clean(self, turn: AssistantTurn) -> list[WarningEvent]:
        """Replace leaked names in `turn.tool_calls` (in place, new `ToolCall`s); return the warnings."""
        events: list[WarningEvent] = []
        calls = list(turn.tool_calls)
        for n, call in enumerate(calls):
            clean, leaked = self._names.called(call.name, by_case=self._by_case)
            if clean == call.name:
                continue
            calls[n] = replace(call, name=clean)
            if leaked and (self._trace or not self._warned):
                later = "" if self._trace else "; other such names in this run are cleaned without a warning"
                events.append(WarningEvent(f"tool call [{call.id or 'no id'}]: the name {call.name!r} is not a tool; "
                                           f"ran {clean!r} ({_how(call.name, clean)}){later}", call.id))
                self._warned = True
        turn.tool_calls = calls
        return events
