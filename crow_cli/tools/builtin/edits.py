"""File-changing tools: `write_file` and `edit_file`. Both need approval and run exclusively.

Both show the person the diff of the change they made (`history.ToolDisplay.diff`, made by
`unified_diff`, the same builder as their approval previews), whether or not anyone was asked.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any

from ...atomic import NotRegularFile, write_atomic
from ...errors import ToolError
from ...history import ToolDisplay
from ..backup import before_write
from ..context import ToolContext
from ..tool import ToolOutput, tool
from ..workspace import resolve_for_write
from .files import BOMS, file_type, require_regular_file

__all__ = ["apply_edit", "check_edit", "edit_file", "unified_diff", "write_file"]

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


def _shown(file: Path, root: Path) -> str:
    return file.relative_to(root).as_posix()


def _read_text(file: Path, path: str) -> str:
    require_regular_file(file, path)
    # the size first, and never more than the limit read: a 3 GB log is refused without reading it
    with file.open("rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        data = b"" if size > MAX_EDIT_BYTES else fh.read(MAX_EDIT_BYTES + 1)
    if max(size, len(data)) > MAX_EDIT_BYTES:
        raise ToolError(f"{path!r} is {max(size, len(data))} bytes; edit_file handles files up to "
                        f"{MAX_EDIT_BYTES} bytes")
    for bom, _codec, name in BOMS:  # before the NUL check: UTF-16/32 text is full of NULs
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


def _write_target(path: str, context: ToolContext) -> tuple[Path, bool]:
    """The file `write_file` would write and whether it exists; refuses anything but a regular file."""
    file = resolve_for_write(path, context)
    if file.exists() and not file.is_file():
        raise ToolError(f"{path!r} is {file_type(file)}, not a regular file; not written")
    return file, file.exists()


def _preview_write(arguments: dict[str, Any], context: ToolContext) -> str:
    """`create PATH (N bytes):` and the content, or `overwrite PATH (N bytes):` and the diff against it."""
    path, content = str(arguments["path"]), str(arguments["content"])
    file, existed = _write_target(path, context)
    size = len(content.encode("utf-8"))
    shown = _shown(file, context.workspace)
    if not existed:
        return f"create {shown} ({size} bytes):\n{content}"
    try:
        before = _read_text(file, path)
    except ToolError as exc:  # binary or too big: it is replaced all the same
        return f"overwrite {shown} ({size} bytes; the current file is not shown: {exc}):\n{content}"
    diff = unified_diff(before, content, shown) or "(no change)\n"
    return f"overwrite {shown} ({size} bytes), changes:\n{diff}"


def _plan_edit(path: str, old_string: str, new_string: str, replace_all: bool,
               context: ToolContext) -> tuple[Path, str, str, int]:
    """(file, text before, text after, occurrences replaced) of an edit; nothing is written.

    Raises:
        ToolError: the edit cannot be made (the message is what the model reads).
    """
    file = resolve_for_write(path, context)
    check_edit(old_string, new_string)
    before = _read_text(file, path)
    after, count = apply_edit(before, old_string, new_string, replace_all, path)
    return file, before, after, count


def check_edit(old_string: str, new_string: str) -> None:
    """Refuse an edit that can change nothing, before the file is read.

    Raises:
        ToolError: `old_string` is empty or equal to `new_string`.
    """
    if old_string == "":
        raise ToolError("old_string is empty; use write_file to create a file")
    if old_string == new_string:
        raise ToolError("old_string and new_string are the same; nothing to change")


def apply_edit(before: str, old_string: str, new_string: str, replace_all: bool, path: str) -> tuple[str, int]:
    """`before` with `old_string` replaced (the text after, occurrences replaced); pure.

    In a CRLF file the model's `\n` line ends match and are written as `\r\n` (an exact match of
    mixed endings wins). `path` only names the file in errors.

    Raises:
        ToolError: `old_string` is not in the text, or occurs more than once without `replace_all`.
    """
    if _uses_crlf(before):  # models send "\n": match and write in the file's own line endings
        crlf_old, crlf_new = _to_crlf(old_string), _to_crlf(new_string)
        if before.count(crlf_old) or not before.count(old_string):  # an exact match of mixed endings wins
            old_string, new_string = crlf_old, crlf_new
    count = before.count(old_string)
    if count == 1:  # str.count skips overlaps: "    0,\n    0,\n" occurs twice in three "    0," lines
        first = before.find(old_string)
        count += sum(1 for at in range(first + 1, first + len(old_string)) if before.startswith(old_string, at))
    if count == 0:
        raise ToolError(f"old_string was not found in {path!r}; read the file and copy the text exactly")
    if count > 1 and not replace_all:
        raise ToolError(f"old_string occurs {count} times in {path!r}; include more surrounding text to make it "
                        "unique, or set replace_all to true")
    return before.replace(old_string, new_string), before.count(old_string)


def _preview_edit(arguments: dict[str, Any], context: ToolContext) -> str:
    """The diff the edit would make; an edit that cannot be made raises its error (nobody is asked)."""
    path = str(arguments["path"])
    file, before, after, _count = _plan_edit(path, str(arguments["old_string"]), str(arguments["new_string"]),
                                             bool(arguments.get("replace_all", False)), context)
    return unified_diff(before, after, _shown(file, context.workspace))


@tool(needs_approval=True, parallel=False, kind="write", preview=_preview_write)
def write_file(path: str, content: str, context: ToolContext | None = None) -> ToolOutput:
    """Create or overwrite a text file in the workspace (missing parent folders are created).

    Args:
        path: file path, relative to the workspace root.
        content: the complete new content of the file.
    """
    context = context or ToolContext.current()
    root = context.workspace
    file, existed = _write_target(path, context)
    file.parent.mkdir(parents=True, exist_ok=True)
    data = content.encode("utf-8")
    try:
        before: str | None = _read_text(file, path) if existed else ""
    except ToolError:  # binary or too big: replaced all the same, without a diff to show
        before = None
    before_write(file, context, data)  # kept for /undo
    _replace(file, data, path)
    name = _shown(file, root)
    diff = None if before is None else unified_diff(before, content, name) or None
    return ToolOutput(f"{'overwrote' if existed else 'created'} {name} ({len(data)} bytes)", ToolDisplay(diff=diff))


def _replace(file: Path, data: bytes, path: str) -> None:
    """Write `data` to `file` atomically (`atomic.write_atomic`); a failure leaves the file as it was.

    Raises:
        ToolError: the write failed, or `file` became a FIFO, device or folder since it was checked.
    """
    try:
        write_atomic(file, data)
    except NotRegularFile as exc:
        raise ToolError(f"{path!r} is {exc.strerror}, not a regular file; not written") from exc
    except OSError as exc:
        raise ToolError(f"{path!r} was not written ({exc.strerror or exc}); the file is unchanged") from exc


@tool(needs_approval=True, parallel=False, kind="write", preview=_preview_edit)
def edit_file(path: str, old_string: str, new_string: str, replace_all: bool = False,
              context: ToolContext | None = None) -> ToolOutput:
    """Replace exact text in a file of the workspace; returns a unified diff of the change.

    `old_string` must occur exactly once (include surrounding lines to make it unique) unless
    `replace_all` is true. Whitespace and indentation must match the file exactly.

    Args:
        path: file path, relative to the workspace root.
        old_string: the exact text to replace.
        new_string: the text to put in its place.
        replace_all: replace every occurrence instead of requiring exactly one.
    """
    context = context or ToolContext.current()
    root = context.workspace
    file, before, after, count = _plan_edit(path, old_string, new_string, replace_all, context)
    data = after.encode("utf-8")
    before_write(file, context, data)  # kept for /undo
    _replace(file, data, path)
    name = _shown(file, root)
    noun = "occurrence" if count == 1 else "occurrences"
    diff = unified_diff(before, after, name)
    return ToolOutput(f"edited {name}: replaced {count} {noun}\n" + diff, ToolDisplay(diff=diff))
