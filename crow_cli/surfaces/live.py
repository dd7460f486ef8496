"""A live area: lines at the bottom of the terminal, redrawn in place, with what is printed going above them.

rich's `Live` moves the cursor up as many rows as it drew the last time. A terminal that rewraps its rows when
it is made narrower turns each drawn line wider than the new width into several rows, so that count falls short
and copies of the area stay on the screen above the redraw. `LiveArea` keeps the cell width of each line it
drew and, at every redraw, counts the rows those lines take at the terminal's current width: it erases that
many rows upwards and draws the area anew, rendered at the current width. Most terminals rewrap (VTE, kitty,
iTerm2, Windows Terminal, tmux); on one that crops rows instead (xterm) that count is too high after a narrowing
and a few rows above the area are erased too, which loses a little of what the screen shows but leaves no copy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import RenderHook
from rich.control import Control
from rich.segment import ControlType, Segment

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, ConsoleRenderable, RenderableType, RenderResult

__all__ = ["SCREEN_SHARE", "LiveArea", "rows_taken"]

SCREEN_SHARE = 3
"""The live area takes at most this share of the terminal's rows (1/3): a terminal made up to three times
narrower rewraps it onto no more rows than the screen has. Rows pushed up past the screen's top go into the
scrollback, where no redraw reaches them: they would stay as a copy above the redrawn area."""


def rows_taken(widths: list[int], columns: int) -> int:
    """The terminal rows that lines of these cell `widths` take on a terminal `columns` wide (an empty line
    takes one; a longer one wraps onto as many rows as it needs)."""
    columns = max(columns, 1)
    return sum(max(1, -(-width // columns)) for width in widths)


class LiveArea(RenderHook):
    """`renderable` drawn below everything the console prints, redrawn by `refresh()`; transient: `stop()`
    erases it. Only on an interactive console; elsewhere nothing is drawn.

    Args:
        console: where to draw.
        renderable: what the area shows, rendered anew at each redraw (at the console's current width; at
            most a third of the terminal's rows, `SCREEN_SHARE`: its last ones, below a "..." row).
    """

    def __init__(self, console: Console, renderable: RenderableType) -> None:
        self.console = console
        self.renderable = renderable
        self._drawn: list[int] = []  # cell width of each line on the screen now; [] when none is
        self._shown: list[list[Segment]] = []  # those lines
        self._next: list[list[Segment]] | None = None  # rendered by `refresh`, to be drawn by the print it makes
        self._started = False

    def start(self) -> None:
        """Draw the area below what is printed from now on (the cursor hidden) and redraw it at each print."""
        if self._started:
            return
        self._started = True
        self.console.show_cursor(False)
        self.console.push_render_hook(self)

    def stop(self) -> None:
        """Erase the area (the cursor is left where its first line was) and show the cursor."""
        if not self._started:
            return
        self._started = False
        self.console.pop_render_hook()
        if self.console.is_interactive:
            self.console.control(self._erase())
        self._drawn, self._shown = [], []
        self.console.show_cursor(True)

    def refresh(self) -> None:
        """Redraw the area, unless what it would show, at the same width, is already on the screen."""
        if not self._started or not self.console.is_interactive:
            return
        lines = self._render(self.console.options)
        if lines == self._shown and rows_taken(self._drawn, self.console.width) == len(self._drawn):
            return  # nothing changed and nothing rewrapped: a still area writes nothing
        self._next = lines
        with self.console:
            self.console.print(Control())

    def process_renderables(self, renderables: list[ConsoleRenderable]) -> list[ConsoleRenderable]:
        """rich's render hook: erase the area, print `renderables`, draw the area below them."""
        if not self.console.is_interactive:
            return renderables
        return [self._erase(), *renderables, _Frame(self)]

    def _render(self, options: ConsoleOptions) -> list[list[Segment]]:
        lines = self.console.render_lines(self.renderable, options, pad=False)
        limit = max(options.size.height // SCREEN_SHARE, 1)
        if len(lines) > limit:  # its newest rows, below a "..." row
            ellipsis = [Segment("...", self.console.get_style("live.ellipsis"))]
            lines = [ellipsis, *lines[len(lines) - limit + 1:]] if limit > 1 else lines[-1:]
        return lines

    def _erase(self) -> Control:
        """Erase the rows the drawn lines take at the terminal's current width, from the cursor (on the last
        one) up; the cursor ends at the start of the first."""
        rows = rows_taken(self._drawn, self.console.width) if self._drawn else 0
        self._drawn, self._shown = [], []
        if not rows:
            return Control()
        return Control(ControlType.CARRIAGE_RETURN, (ControlType.ERASE_IN_LINE, 2),
                       *((ControlType.CURSOR_UP, 1), (ControlType.ERASE_IN_LINE, 2)) * (rows - 1))

    def frame(self, options: ConsoleOptions) -> list[list[Segment]]:
        """The lines to draw now (those `refresh` rendered, else rendered at `options`), remembered as drawn: what
        the render hook draws below a print."""
        lines = self._next if self._next is not None else self._render(options)
        self._next = None
        self._shown = lines
        self._drawn = [Segment.get_line_length(line) for line in lines]
        return lines


class _Frame:
    """The area's lines as one renderable, ending without a newline so the cursor stays on the last one."""

    def __init__(self, area: LiveArea) -> None:
        self.area = area

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines = self.area.frame(options)
        for n, line in enumerate(lines):
            if n:
                yield Segment.line()
            yield from line
