"""Building a run's parts from `Settings`: the model client and the tool registry."""

from __future__ import annotations

from collections.abc import Iterable

from ..config import Settings
from ..loop import LoopSettings
from ..text import strip_controls
from ..tools.registry import ToolRegistry, default_registry
from ..wire.client import ChatClient, ClientSettings

__all__ = ["build_client", "build_registry", "loop_settings", "short_json"]


def build_client(settings: Settings, record_dir: str | None = None) -> ChatClient:
    return ChatClient(ClientSettings(
        base_url=settings.base_url, model=settings.model, api_key=settings.api_key, headers=settings.headers,
        max_retries=settings.max_retries, idle_timeout_s=settings.idle_timeout_s, params=settings.params,
        record_dir=record_dir,
    ))


def build_registry(settings: Settings, *, extra_dirs: Iterable[str] = (), builtins: bool = True) -> ToolRegistry:
    """Built-ins, then entry-point plugins, then tool folders (config `tool_paths`, then `--tools-dir`)."""
    return default_registry((*settings.tool_paths, *extra_dirs), builtins=builtins)


def loop_settings(settings: Settings, *, trace: bool = False) -> LoopSettings:
    return LoopSettings(max_turns=settings.max_turns, tool_timeout_s=settings.tool_timeout_s,
                        max_output_chars=settings.max_output_chars, trace=trace)


def short_json(text: str, limit: int = 80) -> str:
    """One line of at most `limit` characters, for showing tool arguments."""
    line = " ".join(strip_controls(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
