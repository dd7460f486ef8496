"""The chat's sink: draws the events of one turn (or of /compact) on the chat's `TurnView` and counts its tokens."""

from __future__ import annotations

from collections.abc import Mapping

from ...events import (
    Event,
    MessageAppended,
    Notice,
    ReasoningDelta,
    RunFinished,
    SubagentEvent,
    SubagentFinished,
    SubagentStarted,
    TextDelta,
    ToolResultReady,
    ToolRunStarted,
    TurnFinished,
    WarningEvent,
)
from ...history import ToolCall
from ...text import strip_controls
from ..common import short_json
from ..render import TurnView
from ..usage import TokenUse


class ChatSink:
    """The driver's sink for one turn: draws each event on `view` and adds the turn's token use to `usage`
    (the session's count) and `last_usage` (the turn's).

    `in_tools`: the turn ended asking for tool calls (so an interrupt cancelled tools, not an answer).
    """

    def __init__(self, view: TurnView, usage: TokenUse, last_usage: TokenUse,
                 all_prices: Mapping[str, Mapping[str, float]] | None = None) -> None:
        self.view = view
        self.usage = usage
        self.last_usage = last_usage
        self.all_prices = all_prices or {}
        """Every model's `[prices."MODEL"]`: a subagent's requests are priced at its model's."""
        self._child_models: dict[tuple[str, int], str] = {}
        self._calls: dict[int, ToolCall] = {}
        self.in_tools = False

    def handle(self, event: Event) -> None:
        """The driver's sink: draw each event of the turn."""
        progress = isinstance(event, Notice) and event.code == "prompt_progress"  # still no token: keep waiting
        quiet = MessageAppended | ToolRunStarted | ToolResultReady | SubagentStarted | SubagentEvent | SubagentFinished
        if not isinstance(event, quiet) and not progress:
            self.view.waiting(False)
        match event:
            case TextDelta(text=text):
                self.view.text(strip_controls(text))  # model output must not drive the terminal
            case ReasoningDelta(text=text):
                self.view.reasoning(strip_controls(text))
            case TurnFinished():
                self.view.end_answer()
                self.usage.add(event.usage, event.timings)  # llama.cpp's cached tokens are in its timings
                self.last_usage.add(event.usage, event.timings)
                self._calls = {c.index: c for c in event.tool_calls}
                self.in_tools = bool(event.tool_calls)
            case ToolRunStarted(call=call):
                self.view.tool_started(call)
            case ToolResultReady(result=result) if result.outcome != "cancelled":
                self.view.tool_finished(result, self._calls.get(result.index))
                self._calls.pop(result.index, None)
                if not self._calls:  # every call answered: the next turn is being asked for
                    self.view.waiting(True)
            case WarningEvent(message=message):  # after the answer, when one is streaming
                self.view.warning(f"crow: warning: {strip_controls(message)}")
            case Notice(code="prompt_progress"):  # on the waiting spinner, not a line of its own
                self.view.waiting_for(strip_controls(event.message))
            case Notice(code="turn_restarted"):  # the stream broke; the turn is asked for again
                self.view.end_answer()
                self.view.line(strip_controls(event.message), "dim")
            case Notice(message=message):
                self.view.line(strip_controls(message), "dim")
            case SubagentStarted(agent=agent, description=description, model=model):
                self._child_models[(event.call_id, event.index)] = model
                self.view.line(strip_controls(f"  ↳ {agent}: {description} ({model})"), "cyan")
            case SubagentEvent(event=TurnFinished() as turn):  # the child's token use counts with the turn's
                prices = self.all_prices.get(self._child_models.get((event.call_id, event.index), ""))
                self.usage.add_other(turn.usage, turn.timings, prices)
                self.last_usage.add_other(turn.usage, turn.timings, prices)
            case SubagentEvent(agent=agent, event=ToolRunStarted(call=call)):
                self.view.line(strip_controls(f"  ↳ {agent} → {call.name}({short_json(call.arguments)})"), "cyan")
            case SubagentEvent(agent=agent, event=ToolResultReady(result=r)):
                mark, style = ("✓", "green") if r.ok else ("✗", "red")
                self.view.line(strip_controls(f"  ↳ {agent} {mark} {r.name} {r.duration_s:.2f}s"), style)
            case SubagentEvent(agent=agent, event=Notice(message=message) | WarningEvent(message=message)):
                self.view.line(strip_controls(f"  ↳ {agent}: {message}"), "dim")
            case RunFinished(status="cancelled"):
                self.view.cancel_tools()  # no spinner is drawn again for a call that will not finish
            case RunFinished(error=error) if error:
                self.view.end_answer()
                self.view.line(f"crow: error: {strip_controls(error)}", "bold red")

