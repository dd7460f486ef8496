"""File tools that go through the editor: ACP `fs/read_text_file` and `fs/write_text_file`.

When the client advertises them, a session's `read_file`, `write_file` and `edit_file` read and write
through the editor, so unsaved buffers are seen and edits show in the editor. They keep the built-ins'
names, schemas and descriptions, and their paths are still confined to the workspace (checked here,
before the editor is asked). `edit_file` needs both capabilities.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from acp import RequestError
from acp.interfaces import Client
from acp.schema import FileSystemCapabilities
from pydantic import ValidationError

from ...errors import ToolError
from ...tools.builtin.edits import apply_edit, check_edit, unified_diff
from ...tools.builtin.files import MAX_RETURN_CHARS, check_line_range
from ...tools.context import ToolContext
from ...tools.tool import Tool
from ...tools.workspace import resolve_for_read, resolve_for_write, workspace_root
from .convert import editor_failure

__all__ = ["client_file_tools"]


def client_file_tools(tools: Iterable[Tool], client: Client, session_id: str,
                      fs: FileSystemCapabilities | None) -> list[Tool]:
    """`tools` with the built-in file tools replaced by ones using the editor, as far as `fs` allows."""
    can_read, can_write = bool(fs and fs.read_text_file), bool(fs and fs.write_text_file)
    editor = _Editor(client, session_id)
    fns: dict[str, Any] = {}
    if can_read:
        fns["read_file"] = editor.read_file
    if can_write:
        fns["write_file"] = editor.write_file
    if can_read and can_write:
        fns["edit_file"] = editor.edit_file
    out = []
    for tool in tools:
        fn = fns.get(tool.name) if tool.source == "builtin" else None
        if fn is not None:
            tool.schema()  # the built-in's schema and validator, derived once, are kept
            # the built-in's preview reads the disk, not the buffer; what no answer can allow is still refused
            tool = replace(tool, fn=fn, preview=_checked_write if tool.kind == "write" else None)
        out.append(tool)
    return out


def _checked_write(arguments: dict[str, Any], context: ToolContext) -> str:
    """The preview of a write through the editor: the arguments as JSON (the editor shows the edit's diff
    from its buffer), once the path is one a write may go to.

    Raises:
        ToolError: outside the workspace, into a .git (the built-in's own refusal: nobody is asked).
    """
    path = arguments.get("path")
    if isinstance(path, str):
        resolve_for_write(path, context)
    return json.dumps(arguments, ensure_ascii=False, default=str)


class _Editor:
    def __init__(self, client: Client, session_id: str) -> None:
        self.client = client
        self.session_id = session_id

    async def _read(self, path: str, line: int | None = None, limit: int | None = None) -> str:
        file = resolve_for_read(path)  # a skill's file too, as the built-in read_file
        try:
            response = await self.client.read_text_file(session_id=self.session_id, path=str(file), line=line,
                                                        limit=limit)
        except (RequestError, ValidationError) as exc:
            raise ToolError(f"{path!r} could not be read through the editor: {editor_failure(exc)}") from None
        return response.content

    async def _write(self, path: str, content: str) -> str:
        file = resolve_for_write(path)
        if file.is_dir():
            raise ToolError(f"{path!r} is a directory")
        try:
            await self.client.write_text_file(session_id=self.session_id, path=str(file), content=content)
        except (RequestError, ValidationError) as exc:
            raise ToolError(f"{path!r} could not be written through the editor: {editor_failure(exc)}") from None
        return file.relative_to(workspace_root()).as_posix()

    async def read_file(self, path: str, start_line: int | None = None, end_line: int | None = None) -> str:
        check_line_range(start_line, end_line)  # the same refusals as the built-in read_file
        limit = None if end_line is None else end_line - (start_line or 1) + 1
        text = await self._read(path, start_line, limit)
        if len(text) <= MAX_RETURN_CHARS:
            return text
        shown = text[:MAX_RETURN_CHARS].rsplit("\n", 1)[0] + "\n"
        last = (start_line or 1) + shown.count("\n") - 1
        return (f"[read_file: showing lines {start_line or 1}–{last} (at most {MAX_RETURN_CHARS} characters per "
                f"call); read on with start_line={last + 1}]\n{shown}")

    async def write_file(self, path: str, content: str) -> str:
        name = await self._write(path, content)
        return f"wrote {name} ({len(content.encode())} bytes) through the editor"

    async def edit_file(self, path: str, old_string: str, new_string: str, replace_all: bool = False) -> str:
        check_edit(old_string, new_string)
        before = await self._read(path)
        after, count = apply_edit(before, old_string, new_string, replace_all, path)  # the built-in's rules
        name = await self._write(path, after)
        noun = "occurrence" if count == 1 else "occurrences"
        return f"edited {name}: replaced {count} {noun}\n" + unified_diff(before, after, name)
