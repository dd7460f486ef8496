"""`crow run`: one prompt, the answer streamed to stdout, tool activity on stderr."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TextIO

from ..config import Settings
from ..events import (
    Event,
    Notice,
    ReasoningDelta,
    RunFinished,
    TextDelta,
    ToolCallDelta,
    ToolResultReady,
    ToolRunStarted,
    WarningEvent,
)
from ..history import Message, user_message
from ..loop import react
from ..tools.approval import make_approver
from ..tools.mcp import McpServers
from ..tools.workspace import use_workspace
from .approve import terminal_ask
from .common import build_client, build_registry, loop_settings, short_json

__all__ = ["RunOptions", "run_prompt"]


@dataclass(frozen=True)
class RunOptions:
    prompt: str
    tools_dirs: tuple[str, ...] = ()
    no_tools: bool = False
    yes: bool = False
    debug: bool = False
    record_dir: str | None = None


class _Printer:
    """Answer text to stdout as it arrives; everything else to stderr, one line per fact."""

    def __init__(self, out: TextIO, err: TextIO, *, debug: bool) -> None:
        from rich.console import Console

        self.out = out
        self.err = Console(file=err, highlight=False, soft_wrap=True)
        self.debug = debug
        self.at_line_start = True
        self.reasoning_open = False

    def _break_line(self) -> None:
        if not self.at_line_start and self.out.isatty():
            self.out.write("\n")
            self.out.flush()
            self.at_line_start = True

    def handle(self, event: Event) -> None:
        match event:
            case TextDelta(text=text):
                self.out.write(text)
                self.out.flush()
                self.at_line_start = text.endswith("\n")
            case ReasoningDelta(text=text) if self.err.is_terminal or self.debug:
                self.err.print(text, style="dim", end="")
                self.reasoning_open = True
            case ToolCallDelta() if self.debug:
                self.err.print(f"[delta] index={event.index!r} id={event.call_id!r} name={event.name!r} "
                               f"args={event.arguments!r}", style="dim", markup=False)
            case ToolRunStarted(call=call):
                self._close_reasoning()
                self._break_line()
                self.err.print(f"→ {call.name}({short_json(call.arguments)})", style="cyan", markup=False)
            case ToolResultReady(result=r):
                mark, style = ("✓", "green") if r.ok else ("✗", "red")
                detail = "" if r.ok else f": {short_json(r.output, 160)}"
                self.err.print(f"  {mark} {r.name} {r.duration_s:.2f}s{detail}", style=style, markup=False)
            case WarningEvent(message=message):
                self._break_line()
                self.err.print(f"crow: warning: {message}", style="yellow", markup=False)
            case Notice(message=message):
                self.err.print(message, style="dim", markup=False)
            case RunFinished():
                self._close_reasoning()
                if not self.at_line_start:
                    self.out.write("\n")
                    self.out.flush()
                if event.error:
                    self.err.print(f"crow: error: {event.error}", style="bold red", markup=False)

    def _close_reasoning(self) -> None:
        if self.reasoning_open:
            self.err.print()
            self.reasoning_open = False


async def run_prompt(settings: Settings, options: RunOptions, out: TextIO = sys.stdout,
                     err: TextIO = sys.stderr) -> int:
    """Run one prompt to completion; return the process exit code (0, 1, 2)."""
    printer = _Printer(out, err, debug=options.debug)
    use_workspace(settings.workspace)
    approve = make_approver(settings.approval, allow=settings.allow, deny=settings.deny, yes=options.yes,
                            ask=None if options.yes else terminal_ask())
    registry = None if options.no_tools else build_registry(settings, extra_dirs=options.tools_dirs)
    history: list[Message] = []
    if settings.system:
        history.append({"role": "system", "content": settings.system})
    history.append(user_message(options.prompt))

    async with McpServers({} if registry is None else settings.mcp_servers,
                          errlog=sys.stderr if options.debug else None) as mcp_servers:
        if registry is not None:
            await mcp_servers.register_tools(registry)
            for problem in registry.errors:
                printer.handle(WarningEvent(problem))
        client = build_client(settings, options.record_dir)
        code = 1
        try:
            async for event in react(history, client, registry, loop_settings(settings, trace=options.debug),
                                     approve):
                printer.handle(event)
                if isinstance(event, RunFinished):
                    code = event.exit_code
        finally:
            await client.aclose()
    return code
