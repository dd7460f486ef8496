"""Built-in tools. Read-only ones here; each module adds its tools to `BUILTIN_TOOLS`."""

from __future__ import annotations

from ..registry import Tool
from .files import list_directory, read_file

__all__ = ["BUILTIN_TOOLS"]

BUILTIN_TOOLS: list[Tool] = [read_file, list_directory]
