"""Building a run's parts from `Settings`: the model client and the tool registry."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ..config import Settings, default_config_path
from ..context.budget import Budget
from ..context.compact import Checkpoint, Compactor
from ..instructions import find_instructions, system_prompt
from ..loop import LoopSettings
from ..text import strip_controls, visible
from ..tools.context import WebAccess
from ..tools.registry import ToolRegistry, default_registry
from ..wire.client import ChatClient, ClientSettings
from ..wire.window import discover_context_window

if TYPE_CHECKING:
    from rich.console import Console

    from ..tools.hooks import Hooks
    from .persist import SessionRecorder

__all__ = ["build_client", "build_compactor", "build_registry", "loop_settings", "make_console", "plain_terminal",
            "short_json", "warning_to", "web_access", "with_instructions"]


def build_client(settings: Settings, record_dir: str | None = None, *, trace: bool = False) -> ChatClient:
    """The model client for `settings`; `trace` (--debug) reports each request-adaptation decision."""
    return ChatClient(ClientSettings(
        base_url=settings.base_url, model=settings.model, api_key=settings.api_key, headers=settings.headers,
        max_retries=settings.max_retries, idle_timeout_s=settings.idle_timeout_s, params=settings.params,
        params_from=settings.params_from, record_dir=record_dir,
        first_byte_timeout_s=settings.first_byte_timeout_s, reasoning_echo=settings.reasoning_echo,
        adapt_requests=settings.adapt_requests, trace=trace, provider=settings.provider,
    ))


def build_registry(settings: Settings, *, extra_dirs: Iterable[str] = (), builtins: bool = True) -> ToolRegistry:
    """Built-ins, then entry-point plugins, then tool folders (config `tool_paths`, then `--tools-dir`); with
    `[web] search_url` configured, `web_search` too (nothing is searched otherwise)."""
    registry = default_registry((*settings.tool_paths, *extra_dirs), builtins=builtins)
    if builtins and web_access(settings).search_url:
        from ..tools.builtin.web import web_search

        registry.register(replace(web_search), source="builtin")
    return registry


def web_access(settings: Settings) -> WebAccess:
    """What the `[web]` table lets the web tools do."""
    web = settings.web
    return WebAccess(tuple(web.get("allow_hosts") or ()), web.get("search_url") or None)


def loop_settings(settings: Settings, *, trace: bool = False) -> LoopSettings:
    """The loop's limits for `settings` (`repair_tool_calls = false`: no checks with coercions, no names by case,
    no recovered calls, no repeat guard)."""
    repair = settings.repair_tool_calls
    return LoopSettings(max_turns=settings.max_turns, max_repeats=settings.max_repeats if repair else 0,
                        repair_calls=repair, recover_tool_calls=repair, tool_timeout_s=settings.tool_timeout_s,
                        max_output_chars=settings.max_output_chars, trace=trace)


def short_json(text: str, limit: int = 80) -> str:
    """One line of at most `limit` characters, for showing tool arguments."""
    line = " ".join(visible(text).split())  # as the approval question shows it
    return line if len(line) <= limit else line[: limit - 1] + "…"


def plain_terminal() -> bool:
    """Whether output must carry no escape sequence at all: `NO_COLOR` set to anything non-empty
    (https://no-color.org) or `TERM=dumb`."""
    return bool(os.environ.get("NO_COLOR")) or os.environ.get("TERM") == "dumb"


def make_console(file: TextIO | None = None, **options: Any) -> Console:
    """A rich `Console` on `file` (default stdout) for the surfaces' styled lines.

    Under `plain_terminal()` it has no colour system, so it writes no escape sequence at all (rich's
    own NO_COLOR handling drops colours but keeps `dim` and `bold`). Output that is not a terminal
    gets none either (rich's default, unless FORCE_COLOR asks for them). `options` go to `Console`.
    """
    from rich.console import Console

    if plain_terminal():
        options["color_system"] = None
    return Console(file=file, **options)


def build_compactor(settings: Settings, recorder: SessionRecorder | None = None, *,
                    checkpoint: Checkpoint | None = None, hooks: Hooks | None = None) -> Compactor:
    """The conversation's compactor: the window from `context_window` or the server, the recorder's
    checkpoint (or `checkpoint`, without a recorder) to start from, the recorder storing each new one, and the
    `PreCompact` hooks fired before a summary is asked for."""

    async def discover() -> int | None:
        return await discover_context_window(settings.base_url, settings.model, settings.api_key, settings.headers)

    compactor = Compactor(Budget(window=settings.context_window, discover=discover),
                          checkpoint=recorder.checkpoint if recorder is not None else checkpoint)
    if recorder is not None:
        compactor.on_checkpoint.append(recorder.save_checkpoint)
    if hooks is not None and hooks.has("PreCompact"):
        async def pre_compact(trigger: str, focus: str | None) -> None:
            await hooks.fire("PreCompact", {"trigger": trigger, "custom_instructions": focus or ""})

        compactor.before_compact.append(pre_compact)
    return compactor


def warning_to(stream: TextIO | None = None) -> Callable[[str], None]:
    """A `warn` callback: each line as `crow: warning: LINE` (control characters removed) on `stream`
    (default: `sys.stderr` when it is called), flushed."""

    def warn(line: str) -> None:
        import sys

        print(f"crow: warning: {strip_controls(line)}", file=stream or sys.stderr, flush=True)

    return warn


def with_instructions(settings: Settings, root: Path, enabled: bool = True,
                      warn: Callable[[str], None] | None = None, default: str | None = None) -> Settings:
    """`settings` whose system prompt is `default` (crow's built-in prompt, `default_prompt`), then its own
    (`--system`), then the AGENTS.md files that apply to `root` (`instructions`, which lists them; none when
    `enabled` is False). The run's secrets are masked in them; a file skipped (see `instructions`) is one line
    to `warn` (default: `warning_to()`, stderr)."""
    from dataclasses import replace


    found = find_instructions(root, default_config_path().parent, secrets=(settings.api_key, *settings.secrets),
                              warn=warn or warning_to()) if enabled else []
    return replace(settings, system=system_prompt(settings.system, found, default), instructions=tuple(found))
