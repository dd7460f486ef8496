"""File-changing tools: `write_file` and `edit_file`. Both need approval and run exclusively."""

from __future__ import annotations

import difflib
from pathlib import Path

from ...errors import ToolError
from ..backup import before_write
from ..registry import tool
from ..workspace import resolve_in_workspace, workspace_root
from .files import _BOMS

__all__ = ["edit_file", "unified_diff", "write_file"]

MAX_EDIT_BYTES = 2 * 1024 * 1024
MAX_DIFF_CHARS = 20_000


def unified_diff(before: str, after: str, name: str) -> str:
    """A unified diff (`a/NAME` → `b/NAME`, 3 lines of context) of two texts, capped at 20 000 characters."""
    lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                 f"a/{name}", f"b/{name}", n=3)
    text = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
    if len(text) > MAX_DIFF_CHARS:
        text = text[:MAX_DIFF_CHARS] + f"\n[… diff cut at {MAX_DIFF_CHARS} characters]\n"
    return text


def _shown(file: Path) -> str:
    return file.relative_to(workspace_root()).as_posix()


def _read_text(file: Path, path: str) -> str:
    if not file.is_file():
        raise ToolError(f"{path!r} is not a file" if file.exists() else f"{path!r} does not exist")
    data = file.read_bytes()
    if len(data) > MAX_EDIT_BYTES:
        raise ToolError(f"{path!r} is {len(data)} bytes; edit_file handles files up to {MAX_EDIT_BYTES} bytes")
    for bom, _codec, name in _BOMS:  # before the NUL check: UTF-16/32 text is full of NULs
        if data.startswith(bom):
            raise ToolError(f"{path!r} is {name} text; edit_file only edits UTF-8 files; not edited")
    if b"\0" in data[:8192]:
        raise ToolError(f"{path!r} is a binary file; not edited")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(f"{path!r} is not UTF-8 text ({exc.reason} at byte {exc.start}); not edited") from exc


def _uses_crlf(text: str) -> bool:
    """True when most of `text`'s line breaks are CRLF."""
    crlf = text.count("\r\n")
    return crlf > 0 and crlf * 2 >= text.count("\n")


def _to_crlf(text: str) -> str:
    """`text` with every line break (LF or CRLF) written as CRLF."""
    return text.replace("\r\n", "\n").replace("\n", "\r\n")


@tool(needs_approval=True, parallel=False)
def write_file(path: str, content: str) -> str:
    """Create or overwrite a text file in the workspace (missing parent folders are created).

    Args:
        path: file path, relative to the workspace root.
        content: the complete new content of the file.
    """
    file = resolve_in_workspace(path)
    if file.is_dir():
        raise ToolError(f"{path!r} is a directory")
    existed = file.exists()
    file.parent.mkdir(parents=True, exist_ok=True)
    data = content.encode("utf-8")
    before_write(file)  # kept for /undo
    file.write_bytes(data)
    return f"{'overwrote' if existed else 'created'} {_shown(file)} ({len(data)} bytes)"


@tool(needs_approval=True, parallel=False)
def edit_file(path: str, old_string: str, new_string: str, replace_all: bool = False) -> str:
    """Replace exact text in a file of the workspace; returns a unified diff of the change.

    `old_string` must occur exactly once (include surrounding lines to make it unique) unless
    `replace_all` is true. Whitespace and indentation must match the file exactly. In a file with
    CRLF line endings, line breaks in `old_string` and `new_string` match and are written as CRLF.

    Args:
        path: file path, relative to the workspace root.
        old_string: the exact text to replace.
        new_string: the text to put in its place.
        replace_all: replace every occurrence instead of requiring exactly one.
    """
    file = resolve_in_workspace(path)
    if old_string == "":
        raise ToolError("old_string is empty; use write_file to create a file")
    if old_string == new_string:
        raise ToolError("old_string and new_string are the same; nothing to change")
    before = _read_text(file, path)
    if _uses_crlf(before):  # models send "\n": match and write in the file's own line endings
        crlf_old, crlf_new = _to_crlf(old_string), _to_crlf(new_string)
        if before.count(crlf_old) or not before.count(old_string):  # an exact match of mixed endings wins
            old_string, new_string = crlf_old, crlf_new
    count = before.count(old_string)
    if count == 0:
        raise ToolError(f"old_string was not found in {path!r}; read the file and copy the text exactly")
    if count > 1 and not replace_all:
        raise ToolError(f"old_string occurs {count} times in {path!r}; include more surrounding text to make it "
                        "unique, or set replace_all to true")
    after = before.replace(old_string, new_string)
    before_write(file)  # kept for /undo
    file.write_bytes(after.encode("utf-8"))
    name = _shown(file)
    noun = "occurrence" if count == 1 else "occurrences"
    return f"edited {name}: replaced {count} {noun}\n" + unified_diff(before, after, name)
