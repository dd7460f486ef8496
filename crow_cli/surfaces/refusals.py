"""What a run refused: `RunFinished.changes_refused` and the line that says it (`crow run`, plain and `--json`)."""

from __future__ import annotations

from dataclasses import replace

from ..events import Event, RunFinished, ToolResultReady

__all__ = ["Refusals", "refused_line"]


class Refusals:
    """Counts what approval, a rule or the sandbox refused in a run and what changed, and sets
    `RunFinished.changes_refused` when the run tried changes and every one was refused.

    A change is a call that was refused (`denied`: only calls that may change something are asked about) or one
    that ran and changed something: a file edit (a diff) or a command that ran (`ToolDisplay.exit_code` or
    `status`)."""

    def __init__(self) -> None:
        self.refused = 0
        self.made = 0

    def saw(self, event: Event) -> Event:
        """`event`, counted; a `RunFinished` comes back with `changes_refused` set when every change was refused."""
        if isinstance(event, ToolResultReady):
            result = event.result
            display = result.display
            if result.outcome == "denied":
                self.refused += 1
            elif display is not None and (display.diff or display.exit_code is not None or display.status):
                self.made += 1
        elif isinstance(event, RunFinished) and self.refused and not self.made and not event.changes_refused:
            return replace(event, changes_refused=self.refused)
        return event


def refused_line(refused: int) -> str:
    """The last line of a run whose every change was refused."""
    calls = "1 tool call was" if refused == 1 else f"{refused} tool calls were"
    return (f"crow: nothing was changed: every change was refused ({calls} refused; --approval, --allow or a "
            "terminal to answer on lets them run)")
