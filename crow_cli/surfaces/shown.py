"""What the person is shown of a finished tool call below its status line, from `history.ToolDisplay`.

A command's output shows its first and last lines around a `… N lines …` line (as Codex shows a
command's output): the end of a test run holds its summary, the start what ran. An applied edit shows
its diff (longer ones keep their head and tail the same way), coloured where the surface colours.
Every line loses its terminal control characters (`text.strip_controls`); a line a progress bar
redrew with `\\r` shows what a terminal would, its last part. The surfaces (`crow run`'s stderr,
`crow chat`'s `TurnView`) draw these lines; they never read the model's result text.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..history import ToolDisplay
from ..text import strip_controls, visible
from ..todos import TodoItem, checklist

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderResult

__all__ = ["DIFF_LINES", "OUTPUT_LINES", "Indented", "call_arguments", "diff_style", "display_lines", "display_status",
           "todo_lines"]

OUTPUT_LINES = (5, 5)
"""(head, tail): lines of a command's output shown at most before and after the `… N lines …` line."""
DIFF_LINES = (40, 10)
"""(head, tail): lines of an applied edit's diff shown at most, the same way."""
MAX_LINE_CHARS = 240
"""A longer line is cut, with `…`: one line of output stays about one line on the screen."""
INDENT = "    "


_SUBJECTS = ("command", "path", "file_path", "pattern", "query", "url")
"""The argument a call is about, shown first and bare (a command as a command, a path as a path)."""


def call_arguments(arguments: str, limit: int = 80) -> str:
    """A tool call's arguments (its JSON text) on one line of at most `limit` characters, as a person reads
    them: the argument the call is about (`_SUBJECTS`: a command, a path ...) bare, the others as
    `name=value` (JSON values: a string keeps its quotes). `{"command": "pytest -q"}` shows `pytest -q`;
    `{"path": "a.py", "offset": 10}` shows `a.py, offset=10`. Arguments without such a subject, or that are no
    JSON object, show as their JSON text. Newlines show as `⏎`; control characters are removed."""
    try:
        parsed: Any = json.loads(arguments)
    except ValueError:
        parsed = None
    subject = next((key for key in _SUBJECTS if isinstance(parsed, dict) and isinstance(parsed.get(key), str)), None)
    if subject is None:
        line = " ".join(visible(arguments).split())  # as the approval question shows it
    else:
        rest = [f"{key}={json.dumps(value, ensure_ascii=False)}" for key, value in parsed.items() if key != subject]
        line = ", ".join([parsed[subject], *rest])
        line = visible(line.replace("\r\n", "\n").replace("\n", " ⏎ ").replace("\t", " "))
    return line if len(line) <= limit else line[: limit - 1] + "…"


def diff_style(line: str) -> str:
    """The rich style of one line of a unified diff: added green, removed red, hunk headers cyan."""
    if line.startswith(("---", "+++")):
        return "bold"
    return {"+": "green", "-": "red", "@": "cyan"}.get(line[:1], "")


def _line(raw: str) -> str:
    if "\r" in raw:  # a progress bar redrawn in place: the terminal shows its last state
        raw = raw.rstrip("\r").rsplit("\r", 1)[-1]
    line = strip_controls(raw.expandtabs(4))
    return line if len(line) <= MAX_LINE_CHARS else line[: MAX_LINE_CHARS - 1] + "…"


def _head_tail(text: str, head: int, tail: int, total: int | None = None) -> list[str]:
    """The first `head` and last `tail` lines of `text` around a `… N lines …` line; `total`: the lines there were
    in all when `text` holds only their head and tail (a command's capped output)."""
    lines = text.replace("\r\n", "\n").removesuffix("\n").split("\n")
    if len(lines) > head + tail + 1:  # a marker only where it hides more than one line
        hidden = (total if total is not None else len(lines)) - head - tail
        return [*map(_line, lines[:head]), f"… {hidden} lines …", *map(_line, lines[len(lines) - tail:])]
    return [_line(line) for line in lines]


def display_lines(display: ToolDisplay | None) -> list[tuple[str, str]]:
    """The lines to draw below a call's status line, each (text, rich style), indented; [] when none.

    A diff (an applied edit) comes first; else a command's output (`(no output)` when it printed nothing).
    """
    if display is None:
        return []
    if display.todos is not None:
        return todo_lines(display.todos)
    if display.diff:
        head, tail = DIFF_LINES
        return [(INDENT + line, diff_style(line)) for line in _head_tail(display.diff, head, tail)]
    if display.output is not None:
        if not display.output.strip():
            return [(INDENT + "(no output)", "dim")]
        head, tail = OUTPUT_LINES
        return [(INDENT + line, "dim") for line in _head_tail(display.output, head, tail, display.lines)]
    return []


_TODO_STYLES = {"completed": "dim", "in_progress": "bold", "pending": ""}


def todo_lines(todos: Sequence[TodoItem]) -> list[tuple[str, str]]:
    """The model's todo list as checklist lines (`[x] done`, `[~] doing`, `[ ] to do`), indented, each with its
    rich style (done dimmed, the one in progress bold)."""
    lines = checklist(todos).split("\n")
    return [(INDENT + _line(line), _TODO_STYLES[item.status] if todos else "dim")
            for line, item in zip(lines, todos or [TodoItem("")], strict=True)]


class Indented:
    """(text, style) lines as a rich renderable (no markup read from them), each ending its line; a line wider
    than the terminal goes on over as many rows as it needs, each indented as its first row is, so a command's
    output and a diff stay apart from the lines around them. Rendered at the console's width at print time.

    Args:
        lines: the lines (without line ends) and each one's rich style ("" for none).
    """

    def __init__(self, lines: Sequence[tuple[str, str]]) -> None:
        self.lines = list(lines)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from rich.text import Text

        shown = Text(end="")
        for line, style in self.lines:
            body = line.lstrip(" ")
            indent = len(line) - len(body)
            if indent * 2 > options.max_width:  # a terminal too narrow for the indent: rows as wide as can be
                indent = 0
            rows = Text(body).wrap(console, max(options.max_width - indent, 1), overflow="fold")
            for row in rows or [Text()]:
                row.rstrip()  # the space a row was broken at
                shown.append(" " * indent + row.plain + "\n", style=style)
        yield shown


def display_status(display: ToolDisplay | None) -> str | None:
    """How a command ended (`exit code 0`, `timed out after 5 s; …`) for the status line; None for other tools."""
    if display is None or display.status is None:
        return None
    return strip_controls(display.status)
