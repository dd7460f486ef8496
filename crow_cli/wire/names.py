"""Tool names as a server takes them, and back: one `ToolNames` map per set of tools (pure: no I/O).

OpenAI, DeepSeek, Groq, Anthropic-compatible endpoints and most others refuse a function name outside
`^[a-zA-Z0-9_-]{1,64}$` (OpenAI: "Invalid 'tools[0].function.name': string does not match pattern");
Gemini and Moonshot also want a letter or `_` first, and some servers refuse `-`. A tool whose name a
server refuses is sent under the closest name it takes, unique among the names sent; the model calls it
by that name, and the map gives the tool back. The tool registry names its tools so once (`WIRE_NAME`,
for every server); a `rename_tools` rule (`wire.rules.tools`) names the registry's names again for a server
that refuses even those.

Some served models leak control tokens of their chat template into the function name of a streamed
tool call (`lookup_order<|channel|>commentary`, `functions.read_file`, a trailing space): the reverse
lookup (`ToolNames.called`, `clean_tool_name`) takes such a name as the tool it becomes when cleaned.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable

from .profiles import LEAKED_TOKEN, TOOL_NAMESPACE

__all__ = ["MAX_LENGTH", "WIRE_NAME", "ToolNames", "clean_tool_name", "wire_name"]

MAX_LENGTH = 64
"""The longest function name servers take (characters)."""
WIRE_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""The function names every OpenAI-compatible server takes (matched in full)."""
_OUTSIDE = re.compile(r"[^A-Za-z0-9_-]")


def wire_name(name: str, rule: re.Pattern[str] = WIRE_NAME) -> str:
    """`name` as a server whose names match `rule` (in full) takes it, not yet made unique.

    Every character outside `[A-Za-z0-9_-]` becomes `_` (`"tool"` for an empty name); where `rule` still
    refuses it, `-` becomes `_` too, then a `t_` prefix is added; the result is cut to `MAX_LENGTH`. A
    name `WIRE_NAME` takes is returned as it is by the default rule.
    """
    base = _OUTSIDE.sub("_", name) or "tool"
    if not rule.fullmatch(base[:MAX_LENGTH]):
        base = base.replace("-", "_")
    if not rule.fullmatch(base[:MAX_LENGTH]):
        base = f"t_{base}"
    return base[:MAX_LENGTH]


def clean_tool_name(name: str, known: Collection[str], *, by_case: bool = True) -> tuple[str, bool]:
    """The known tool a streamed function name stands for.

    Args:
        name: the function name as the stream assembled it.
        known: the tool names the model was offered.
        by_case: also take the one known name that differs only in case (the last step below).

    Returns:
        `(name, False)` when `name` is known or no cleaning gives a known name; else `(clean, True)`:
        the first known name among `name` trimmed of whitespace, cut before its first `<|` (then
        trimmed), and either of those without a leading `functions.` (gpt-oss / Harmony, Kimi K2); else the
        one known name that differs from one of those only in case (`Read_File`, small models).
    """
    if name in known:
        return name, False
    trimmed = name.strip()
    cut = name.split(LEAKED_TOKEN, 1)[0].strip()
    candidates = (trimmed, cut, trimmed.removeprefix(TOOL_NAMESPACE), cut.removeprefix(TOOL_NAMESPACE))
    for candidate in candidates:
        if candidate and candidate in known:
            return candidate, True
    if not by_case:
        return name, False
    lowered: dict[str, list[str]] = {}
    for known_name in known:
        lowered.setdefault(known_name.lower(), []).append(known_name)
    for candidate in candidates:  # `Read_File`: one offered name differs only in case
        if len(same := lowered.get(candidate.lower(), [])) == 1:
            return same[0], True
    return name, False


class ToolNames:
    """Each tool's name and the name it is sent under, both ways, for one set of tools.

    A name `rule` matches in full is sent as it is; any other is sent as `wire_name(name, rule)`, with a
    `_2`, `_3` … suffix (within `MAX_LENGTH`) where that is another tool's name or already given. Names
    `rule` takes keep theirs whatever the order, and the names are made unique once, here: a later
    lookup never renames.

    Args:
        names: the tools' names, in the order they are offered (a repeated name counts once).
        rule: the names the server takes (`WIRE_NAME`, or a known rule of `wire.rules.NAME_RULES`).
    """

    def __init__(self, names: Iterable[str], rule: re.Pattern[str] = WIRE_NAME) -> None:
        own = tuple(dict.fromkeys(names))
        taken = set(own)
        self._wire: dict[str, str] = {}
        for name in own:
            new = name
            if not rule.fullmatch(name):
                base = new = wire_name(name, rule)
                k = 1
                while new in taken:
                    k += 1
                    new = f"{base[: MAX_LENGTH - 1 - len(str(k))]}_{k}"
                taken.add(new)
            self._wire[name] = new
        self._own = {wire: name for name, wire in self._wire.items()}

    def wire(self, name: str) -> str:
        """The name the tool named `name` is sent under (`name` itself for most tools, and for no tool)."""
        return self._wire.get(name, name)

    def own(self, wire: str) -> str | None:
        """The name of the tool sent as `wire`, or None when no tool is."""
        return self._own.get(wire)

    @property
    def sent(self) -> tuple[str, ...]:
        """Every name sent, in the tools' order."""
        return tuple(self._wire.values())

    @property
    def renamed(self) -> dict[str, str]:
        """Tool name -> the name it is sent under, for the tools whose names differ (a new dict)."""
        return {name: wire for name, wire in self._wire.items() if wire != name}

    @property
    def back(self) -> dict[str, str]:
        """Name sent -> the tool's name, for the tools whose names differ (the reverse of `renamed`)."""
        return {wire: name for wire, name in self._own.items() if wire != name}

    def called(self, name: str, *, by_case: bool = True) -> tuple[str, bool]:
        """The name sent that a model's tool call `name` stands for, and whether it was cleaned (`by_case`: as
        `clean_tool_name` takes it).

        A name sent is itself; a tool's own name is the name it is sent under (`(wire, False)`: the model
        used the name it knows the tool by); else `clean_tool_name` over the names sent (`(clean, True)`
        for a name with leaked template tokens or spaces); any other name is `(name, False)`.
        """
        if name in self._own:
            return name, False
        if name in self._wire:
            return self._wire[name], False
        return clean_tool_name(name, self._own, by_case=by_case)
