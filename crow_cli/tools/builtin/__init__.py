"""Built-in tools, confined to the workspace: read-only ones run in parallel without approval; those that
change files or run commands need approval and run exclusively."""

from __future__ import annotations

from ..tool import Tool
from .edits import edit_file, write_file
from .files import list_directory, read_file
from .plan import exit_plan_mode, todo_write
from .search import search_files
from .shell import run_shell, shell_kill, shell_output
from .web import web_fetch

__all__ = ["BUILTIN_TOOLS"]

BUILTIN_TOOLS: list[Tool] = [read_file, list_directory, search_files, write_file, edit_file, run_shell, shell_output,
                             shell_kill, web_fetch, todo_write, exit_plan_mode]
