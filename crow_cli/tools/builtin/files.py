"""Read-only file tools, confined to the workspace."""

from __future__ import annotations

from ...errors import ToolError
from ..registry import tool
from ..workspace import resolve_in_workspace, workspace_root

__all__ = ["list_directory", "read_file"]

MAX_READ_BYTES = 512 * 1024
MAX_ENTRIES = 1000


@tool
def read_file(path: str, start_line: int | None = None, end_line: int | None = None) -> str:
    """Read a text file from the workspace.

    Args:
        path: file path, relative to the workspace root.
        start_line: first line to return (1-based, inclusive); default the first.
        end_line: last line to return (1-based, inclusive); default the last.
    """
    file = resolve_in_workspace(path)
    if not file.is_file():
        raise ToolError(f"{path!r} is not a file")
    size = file.stat().st_size
    with file.open("rb") as fh:
        data = fh.read(MAX_READ_BYTES + 1)
    if b"\0" in data[:8192]:
        raise ToolError(f"{path!r} is a binary file ({size} bytes); not read")
    cut = len(data) > MAX_READ_BYTES
    text = data[:MAX_READ_BYTES].decode("utf-8", "replace")
    if start_line is None and end_line is None:
        body = text
    else:
        lines = text.splitlines(keepends=True)
        first = max(1, start_line or 1)
        last = min(len(lines), end_line or len(lines))
        if first > len(lines):
            raise ToolError(f"{path!r} has {len(lines)} lines; start_line {first} is past the end")
        body = "".join(lines[first - 1 : last])
    if cut:
        body += f"\n[… file is {size} bytes; only the first {MAX_READ_BYTES} were read]"
    return body


@tool
def list_directory(path: str = ".") -> str:
    """List a directory of the workspace: one entry per line, directories end with `/`.

    Args:
        path: directory path, relative to the workspace root.
    """
    folder = resolve_in_workspace(path)
    if not folder.is_dir():
        raise ToolError(f"{path!r} is not a directory")
    entries = sorted(folder.iterdir(), key=lambda p: (not p.is_dir(), p.name))
    lines = [p.name + ("/" if p.is_dir() else "") for p in entries[:MAX_ENTRIES]]
    if len(entries) > MAX_ENTRIES:
        lines.append(f"[… {len(entries) - MAX_ENTRIES} more entries]")
    shown = folder.relative_to(workspace_root()).as_posix() or "."
    return f"{shown}/ ({len(entries)} entries)\n" + "\n".join(lines) if lines else f"{shown}/ is empty"
