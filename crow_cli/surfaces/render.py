"""Rendering a streamed answer in the terminal at a cost linear in its length.

`MarkdownBlocks` splits streamed Markdown into finished blocks, rendered once, and a small live tail, so each
refresh costs O(max_tail), not O(answer). `TurnView` draws one chat turn with rich around it: the live area,
tool lines, reasoning, warnings, or plain text where there is no terminal. Soft line breaks are drawn as hard
ones: the model's lines stay its lines (`honest_markdown`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..history import ToolCall, ToolResult
from ..text import strip_controls
from .common import short_json
from .shown import Indented, call_arguments, diff_style, display_lines, display_status

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderResult
    from rich.markdown import Markdown

    from .live import LiveArea

__all__ = ["MarkdownBlocks", "TurnView", "honest_markdown"]

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_NOT_A_PARAGRAPH = re.compile(r"^ {0,3}(?:[-*+>#|]|\d+[.)]|=|<)")
"""How a block that is not a plain paragraph starts (a list, a quote, a heading, a table, HTML ...)."""
LIVE_ROWS = 3
"""A streaming paragraph keeps at most this many rows live; its rows above them are printed for good, so a resize
rewraps only a few rows the live area redraws (the rows of a taller area may go up into the scrollback)."""
_AFTER_BLOCK = "<!-- -->\n\n"  # renders as nothing; what follows is spaced as a block after a block
WAIT_SECONDS_AFTER_S = 3.0
"""From this many seconds without a first token on, the waiting spinner counts the seconds."""


class MarkdownBlocks:
    """Streamed Markdown in, finished blocks out; the unfinished rest stays in `tail`.

    Finished blocks are frozen: rendered once, printed above the live area, never touched again; the tail is
    re-rendered as it grows. A block ends at a blank line outside a code fence, or at a fence's closing line; a
    tail that grows past `max_tail` characters without ending (a long code block, a huge paragraph) is cut at a
    line end, re-opening the fence in the tail. Blocks are rendered one by one, yet spaced as the answer rendered
    whole would be: a block that follows another one is rendered after an empty HTML comment (`_AFTER_BLOCK`),
    which draws nothing but makes rich put its usual blank line between two top-level blocks (a list or a code
    block brings its own spacing, which a plain extra blank line would double).

    Args:
        max_tail: the live tail is cut at a line end once it is longer than this (characters).
    """

    def __init__(self, max_tail: int = 2000) -> None:
        self.max_tail = max_tail
        self.tail = ""
        """The unfinished part: what the live area shows."""
        self._scan = 0  # tail[:_scan] holds only complete lines already classified
        self._fence: str | None = None  # the opening fence line while inside a code block
        self._marker = "```"  # its backticks or tildes
        self.continues = False
        """Whether the tail continues a block cut for length (not a new block): no blank line before it."""

    def feed(self, text: str) -> list[str]:
        """Add streamed text; returns the blocks it finished (possibly none), in order.

        Only the last block returned can have been cut for length (then `continues` is True); the
        first one continues the previous block when `continues` was True before the call.
        """
        self.tail += text
        blocks: list[str] = []
        while True:
            end = self.tail.find("\n", self._scan)
            if end < 0:
                break
            line = self.tail[self._scan : end]
            self._scan = end + 1
            if self._fence is not None:
                closing = line.strip()
                if len(closing) >= len(self._marker) and closing == closing[0] * len(closing) \
                        and closing[0] == self._marker[0]:
                    self._fence = None
                    self._cut(self._scan, blocks)
                continue
            match = _FENCE.match(line)
            if match:
                self._fence, self._marker = line.strip(), match.group(1)
            elif not line.strip():
                if self.tail[: self._scan - 1].strip():
                    self._cut(self._scan, blocks)
                else:  # a blank line right after a cut for length: the block did end there
                    self.continues = False
        if len(self.tail) > self.max_tail:
            self._cut_long(blocks)
        return blocks

    def finish(self) -> str:
        """The remaining tail (the last block); the splitter is empty afterwards."""
        rest, self.tail, self._scan, self._fence = self.tail, "", 0, None
        self.continues = False
        return rest

    @property
    def in_fence(self) -> bool:
        """Whether the tail is inside a code block."""
        return self._fence is not None

    def cut_at(self, at: int) -> str:
        """Take `tail[:at]` out as a block cut for length (the tail then `continues` it): the rows of a paragraph
        that are done, printed for good while its last rows stay live."""
        block = self.tail[:at]
        self.tail = self.tail[at:]
        self._scan = max(self._scan - at, 0)
        self.continues = True
        return block

    def _cut(self, at: int, blocks: list[str]) -> None:
        block = self.tail[:at]
        if block.strip():
            blocks.append(block)
            self.continues = False
        self.tail = self.tail[at:]
        self._scan -= at

    def _cut_long(self, blocks: list[str]) -> None:
        if self._fence is not None:  # close the code block here, re-open it in the tail
            if self._scan <= len(self._fence) + 1:
                return
            fence = self._fence
            block = self.tail[: self._scan] + self._marker + "\n"
            blocks.append(block)
            self.tail = fence + "\n" + self.tail[self._scan :]
            self._scan = len(fence) + 1
            self.continues = True
            return
        at = self.tail.rfind("\n", 0, self._scan) + 1 or self.tail.rfind(" ") + 1
        if at > 0:
            self._cut(at, blocks)
            self.continues = True


def _links_match(tokens: Iterable[Any]) -> bool:
    """True when every link among the markdown-it `tokens` shows its own target as its text (`<url>`,
    a bare URL, `[https://x](https://x)`)."""
    href: str | None = None
    text: list[str] = []
    for token in tokens:
        if token.type == "link_open":
            href, text = str(token.attrs.get("href", "")), []
        elif token.type == "link_close":
            shown = "".join(text).strip()
            if href is None or shown not in (href, href.removeprefix("mailto:")):
                return False
            href = None
        elif href is not None and token.type in ("text", "code_inline"):
            text.append(token.content)
        if token.children and not _links_match(token.children):
            return False
    return True


def honest_markdown(source: str, code_theme: str) -> Markdown:
    """`source` as rich Markdown keeping its line breaks, whose links never hide where they lead: terminal
    hyperlinks (OSC 8) only when each link's text is its target; else every link shows its target after its text, as
    `text (target)`. `[https://github.com/acme](https://evil.example)` would show one URL and open another."""
    from rich.markdown import Markdown

    markdown = Markdown(source, code_theme=code_theme)
    markdown.hyperlinks = _links_match(markdown.parsed)
    _keep_line_breaks(markdown.parsed)
    return markdown


def _keep_line_breaks(tokens: Iterable[Any]) -> None:
    """Make each soft line break among the markdown-it `tokens` a hard one: a listing or a poem the model
    wrote line by line stays line by line (CommonMark joins such lines into one paragraph; the model
    meant the break). Code blocks have no inline tokens and are untouched."""
    for token in tokens:
        if token.type == "softbreak":
            token.type = "hardbreak"
        elif token.children:
            _keep_line_breaks(token.children)


def _unpadded(console: Console, renderable: Any, options: ConsoleOptions) -> Iterator[Any]:
    """`renderable`'s lines without the spaces rich pads them with to the full width (uncoloured ones).

    A terminal made narrower rewraps every row that is as wide as it was: padded, every row of the live area
    would count as two or more at its next redraw (`live.LiveArea` counts from the drawn widths), and a terminal
    that crops rows instead would lose that many more rows above the area. Unpadded, only rows with text past
    the new width count.
    """
    from rich.segment import Segment

    for line in console.render_lines(renderable, options, pad=False):
        while line and not line[-1].text.strip(" ") and (line[-1].style is None or not line[-1].style.bgcolor):
            line.pop()
        if line and (line[-1].style is None or not line[-1].style.bgcolor):
            last = line[-1]
            line[-1] = Segment(last.text.rstrip(" "), last.style, last.control)
        yield from line
        yield Segment.line()


class _LiveArea:
    """What the live area shows: the Markdown tail, the reasoning line, a spinner per running tool."""

    def __init__(self, view: TurnView) -> None:
        self.view = view

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from rich.text import Text

        v = self.view
        if v.reasoning_line and v.show_reasoning:
            yield Text(v.reasoning_line, style="dim italic")
        if v.blocks.tail.strip():
            tail = honest_markdown(v.markdown_source(v.blocks.tail, continues=v.blocks.continues), v.code_theme)
            yield from _unpadded(console, tail, options)
        for _call, spinner in v.spinners.values():
            yield spinner
        if v.waiting_spinner is not None:
            yield v.waiting_spinner


class TurnView:
    """Draws the events of chat turns on a rich `Console`.

    All drawing happens on the caller's thread (no refresh thread: a redraw racing a print leaves
    stray lines): deltas redraw at most every `min_interval_s`, and the owner calls `tick()`
    periodically so spinners move and throttled text shows.

    The Markdown tail and a spinner per running tool share one live area (`live.LiveArea`: redrawn at the
    terminal's current width, so a resize leaves no stale copy); a streaming paragraph keeps only its last
    `LIVE_ROWS` rows live, the rows above them printed for good where they wrap (a terminal made narrower pushes
    rows of a tall area up into its scrollback, out of a redraw's reach); reasoning is dimmed; a line per
    finished tool call (ok/error and duration) has what the call shows the person below it (`shown`: a command's
    first and last lines, an applied edit's diff); warnings that come while the answer streams come after it.
    With `plain=True` (NO_COLOR, a dumb terminal, not a terminal) text is written as it arrives, without
    Markdown, colour or cursor movement. While the user is asked something (`suspended`), lines are held back
    and shown once the question is answered, so none lands on the question's line.

    Args:
        console: where to draw.
        plain: no Markdown, colour, spinners or cursor movement; text written as it arrives.
        show_reasoning: show `reasoning_content` (dimmed); `/reasoning` toggles it.
        min_interval_s: shortest time between two redraws caused by deltas (0: every delta).
    """

    code_theme = "ansi_dark"

    def __init__(self, console: Console, *, plain: bool, show_reasoning: bool = True,
                 min_interval_s: float = 0.05) -> None:
        self.console = console
        self.plain = plain
        self.show_reasoning = show_reasoning
        self.min_interval_s = min_interval_s
        self._last_refresh = 0.0
        self.blocks = MarkdownBlocks()
        self.reasoning_line = ""
        self.spinners: dict[int, tuple[ToolCall, Any]] = {}
        self._live: LiveArea | None = None
        self._paused = 0  # > 0 while the user is being asked something: no live area
        self._at_line_start = True
        self._in_reasoning = False
        self._blocks_shown = 0  # Markdown blocks of this answer printed so far
        self._held: list[Callable[[], None]] = []  # lines waiting for the question to be answered
        self._answering = False  # answer text came and the turn has not ended: warnings wait for its end
        self._after_answer: list[str] = []
        self.waiting_spinner: Any = None
        """Shown while the model has not answered yet (`waiting`)."""
        self._waiting_since = 0.0
        self._waiting_for = "waiting for the model"

    # live area

    def _ensure_live(self) -> None:
        if self.plain or self._live is not None or self._paused:
            return
        from .live import LiveArea

        self._live = LiveArea(self.console, _LiveArea(self))
        self._live.start()

    def _refresh(self) -> None:
        now = time.monotonic()
        if self._live is not None and now - self._last_refresh >= self.min_interval_s:
            self._last_refresh = now
            self._live.refresh()

    def tick(self) -> None:
        """Redraw the live area now (spinners move, throttled text appears); call ~10 times a second."""
        if self._live is not None:
            if self.waiting_spinner is not None:
                self.waiting_spinner.update(text=self.waiting_text())
            self._last_refresh = time.monotonic()
            self._live.refresh()

    def waiting(self, on: bool) -> None:
        """Show (or drop) a "waiting for the model" spinner until the first token arrives."""
        if self.plain or on == (self.waiting_spinner is not None):
            return
        if on:
            from rich.spinner import Spinner

            self._waiting_since, self._waiting_for = time.monotonic(), "waiting for the model"
            self.waiting_spinner = Spinner("dots", text=self.waiting_text(), style="dim")
            self._ensure_live()
        else:
            self.waiting_spinner = None
        self._refresh()

    def waiting_for(self, what: str) -> None:
        """What the wait for the first token is (`processing the prompt (512 of 8,000 tokens)`), as the
        server reports it; shown on the waiting spinner."""
        self._waiting_for = what.rstrip("…. ")
        if self.waiting_spinner is not None:
            self.waiting_spinner.update(text=self.waiting_text())
            self._refresh()

    def waiting_text(self, waited_s: float | None = None) -> str:
        """The waiting spinner's text: what is awaited, and from `WAIT_SECONDS_AFTER_S` on the seconds waited
        (`waited_s`; default: since `waiting(True)`)."""
        waited = time.monotonic() - self._waiting_since if waited_s is None else waited_s
        return f"{self._waiting_for}… {waited:.0f} s" if waited >= WAIT_SECONDS_AFTER_S else f"{self._waiting_for}…"

    def stop(self) -> None:
        """Stop the live area (between turns, before prompting)."""
        self.waiting_spinner = None
        if self._live is not None:
            self._live.stop()
            self._live = None

    @contextmanager
    def suspended(self) -> Iterator[None]:
        """Pause the live area, e.g. while asking the user something; it resumes on demand."""
        self.stop()
        self._end_plain_line()
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1
            if not self._paused:
                held, self._held = self._held, []
                for draw in held:
                    draw()
            if self.spinners or self.blocks.tail:
                self._ensure_live()

    def _show(self, draw: Callable[[], None]) -> None:
        """Draw a line now, or once the user has answered (while `suspended`)."""
        if self._paused:
            self._held.append(draw)
        else:
            draw()

    # answer text

    def text(self, delta: str) -> None:
        """A piece of the visible answer."""
        self._close_reasoning()
        self._answering = True
        if self.plain:
            self._write(delta)
            return
        self._ensure_live()
        continues = self.blocks.continues
        for block in self.blocks.feed(delta):
            self._print_markdown(block, continues=continues)
            continues = False  # a block after the first in one feed starts a new block
        self._print_done_rows()
        self._refresh()

    def _print_done_rows(self) -> None:
        """Print the rows of a streaming paragraph above its last `LIVE_ROWS` for good, cut where they wrap: the
        words of those rows, checked to render as the same rows on their own (inline markup can move them)."""
        tail = self.blocks.tail
        if self._live is None or self.blocks.in_fence or "\n" in tail.strip("\n") or _NOT_A_PARAGRAPH.match(tail) \
                or len(tail) < LIVE_ROWS * 8:
            return
        continues = self.blocks.continues
        rows = self._rows(tail, continues)
        if len(rows) <= LIVE_ROWS:
            return
        done = rows[: len(rows) - LIVE_ROWS]
        while done and not done[0].strip():  # the blank row spacing it from the block before
            done = done[1:]
        words = sum(len(row.split()) for row in done)
        found = list(re.finditer(r"\S+", tail))
        if not words or words >= len(found):
            return
        at = found[words].start()
        if self._rows(tail[:at], continues) != rows[: len(rows) - LIVE_ROWS]:
            return
        self._print_markdown(self.blocks.cut_at(at), continues=continues)

    def _rows(self, source: str, continues: bool) -> list[str]:
        """The rows `source` renders to at the console's width (their text, trailing spaces dropped)."""
        lines = self.console.render_lines(honest_markdown(self.markdown_source(source, continues=continues),
                                                          self.code_theme), pad=False)
        return ["".join(segment.text for segment in line).rstrip() for line in lines]

    def end_answer(self) -> None:
        """The model turn ended: print what is left of the answer for good."""
        self._close_reasoning()
        continues = self.blocks.continues
        rest = self.blocks.finish()
        if self.plain:
            self._end_plain_line()
        elif rest.strip():
            self._print_markdown(rest, continues=continues)
        self._blocks_shown = 0
        self._answering = False
        held, self._after_answer = self._after_answer, []
        for text in held:
            self.line(text, "yellow")
        self._refresh()

    def warning(self, text: str) -> None:
        """A warning line (yellow): while an answer streams, shown once it has ended (`end_answer`), never
        inside it (the token-cap warning comes as the stream ends, before the answer's last block is drawn)."""
        if self._answering:
            self._after_answer.append(text)
        else:
            self.line(text, "yellow")

    def markdown_source(self, block: str, *, continues: bool) -> str:
        """The Markdown to render for `block`: after an earlier block of this answer, spaced as one."""
        return block if continues or not self._blocks_shown else _AFTER_BLOCK + block

    def _print_markdown(self, block: str, *, continues: bool) -> None:
        self.console.print(honest_markdown(self.markdown_source(block, continues=continues), self.code_theme))
        self._blocks_shown += 1

    # reasoning

    def reasoning(self, delta: str) -> None:
        """A piece of reasoning text: dimmed, shown only while `show_reasoning` is on."""
        if not self.show_reasoning:
            return
        if self.plain:
            if not self._in_reasoning:
                self._end_plain_line()
                self._write("(thinking) ")
            self._in_reasoning = True
            self._write(delta)
            return
        self._in_reasoning = True
        self._ensure_live()
        self.reasoning_line += delta
        if "\n" in self.reasoning_line:
            done, self.reasoning_line = self.reasoning_line.rsplit("\n", 1)
            self.console.print(done, style="dim italic", markup=False, highlight=False)
        self._refresh()

    def _close_reasoning(self) -> None:
        if not self._in_reasoning:
            return
        self._in_reasoning = False
        if self.plain:
            self._end_plain_line()
        elif self.reasoning_line:
            self.console.print(self.reasoning_line, style="dim italic", markup=False, highlight=False)
        self.reasoning_line = ""

    # tools

    def tool_started(self, call: ToolCall) -> None:
        """A tool call began running: a spinner (or a plain line) with its name and arguments."""
        label = f"{strip_controls(call.name)}({call_arguments(call.arguments, 60)})"  # the model wrote the name
        if self.plain:
            self._end_plain_line()
            self._show(lambda: self._write(f"→ {label}\n"))
            return
        from rich.spinner import Spinner

        self.spinners[call.index] = (call, Spinner("dots", text=label, style="cyan"))
        self._ensure_live()
        self._refresh()

    def tool_finished(self, result: ToolResult, call: ToolCall | None) -> None:
        """A tool call ended: its spinner becomes an ok/error line with the duration."""
        self.spinners.pop(result.index, None)
        args = f"({call_arguments(call.arguments, 60)})" if call else ""
        name = strip_controls(result.name)  # the model wrote it
        status = "ok" if result.ok else result.outcome.replace("_", " ")  # error, denied, timeout ...
        ended = display_status(result.display)  # a command: its exit code, never read from the output
        detail = f" · {ended}" if ended else "" if result.ok else f": {short_json(result.output, 120)}"
        shown = display_lines(result.display)  # its output's first and last lines, an applied edit's diff
        if self.plain:
            body = "".join(line + "\n" for line, _style in shown)
            self._show(lambda: self._write(f"  {status} {name} {result.duration_s:.2f}s{detail}\n{body}"))
            return
        mark, style = ("✓", "green") if result.ok else ("✗", "red")

        def draw() -> None:
            self.console.print(f"{mark} {name}{args} {status} {result.duration_s:.2f}s{detail}", style=style,
                               markup=False, highlight=False)
            if shown:
                self.console.print(Indented(shown), end="", highlight=False)

        self._show(draw)
        self._refresh()

    def cancel_tools(self) -> None:
        """Ctrl-C: drop the spinners of tools that will not finish."""
        self.spinners.clear()

    # lines

    def line(self, text: str, style: str = "") -> None:
        """A whole line of status text (notices, warnings, the usage footer)."""
        self._close_reasoning()
        if self.plain:
            self._end_plain_line()
            self._show(lambda: self._write(text + "\n"))
            return
        self._show(lambda: self.console.print(text, style=style or None, markup=False, highlight=False))

    def call_preview(self, preview: str) -> None:
        """What a call waiting for approval would do (`tools.approval.describe_call`), shown at once.

        A unified diff has its added and removed lines coloured.
        """
        if self.plain:
            self._end_plain_line()
            self._write(preview.rstrip("\n") + "\n")
            return
        is_diff = preview.startswith("--- ")
        lines = preview.rstrip("\n").split("\n")
        self.console.print(Indented([(line, diff_style(line) if is_diff and not line.startswith(("---", "+++"))
                                      else "") for line in lines]), end="", highlight=False)

    def document(self, text: str) -> None:
        """A whole Markdown text drawn at once (a plan the model handed over), as answers are drawn; `text`
        must have lost its control characters already."""
        if self.plain:
            self._end_plain_line()
            self._write(text.rstrip("\n") + "\n")
            return
        self.console.print(honest_markdown(text, self.code_theme))

    def _write(self, text: str) -> None:
        self.console.file.write(text)
        self.console.file.flush()
        if text:
            self._at_line_start = text.endswith("\n")

    def _end_plain_line(self) -> None:
        if self.plain and not self._at_line_start:
            self._write("\n")
