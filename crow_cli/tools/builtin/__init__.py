"""Built-in tools, confined to the workspace: read-only ones run in parallel without approval; those that
change files or run commands need approval and run exclusively.

This package is a tool plugin as any other is (`register_tools`, the hook `tools.registry` calls), named in
`registry.DEFAULT_PLUGINS`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..tool import Tool
from .edits import edit_file, write_file
from .files import list_directory, read_file
from .plan import exit_plan_mode, todo_write
from .search import search_files
from .shell import run_shell, shell_kill, shell_output
from .web import web_fetch

__all__ = ["BUILTIN_TOOLS", "register_tools"]

BUILTIN_TOOLS: list[Tool] = [read_file, list_directory, search_files, write_file, edit_file, run_shell, shell_output,
                             shell_kill, web_fetch, todo_write, exit_plan_mode]


def register_tools(register: Callable[[Tool], Any]) -> None:
    """The plugin hook: each built-in tool, a copy of it (a registry may rename what it holds)."""
    for builtin in BUILTIN_TOOLS:
        register(replace(builtin))
