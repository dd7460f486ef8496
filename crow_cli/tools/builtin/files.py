"""Read-only file tools, confined to the workspace."""

from __future__ import annotations

import codecs

from ...errors import ToolError
from ..registry import tool
from ..workspace import resolve_in_workspace, workspace_root

__all__ = ["list_directory", "read_file"]

MAX_READ_BYTES = 512 * 1024
MAX_ENTRIES = 1000


_BOMS = ((codecs.BOM_UTF32_LE, "utf-32", "UTF-32"), (codecs.BOM_UTF32_BE, "utf-32", "UTF-32"),
         (codecs.BOM_UTF16_LE, "utf-16", "UTF-16"), (codecs.BOM_UTF16_BE, "utf-16", "UTF-16"))


def _decode(data: bytes, cut: bool, shown: str) -> tuple[str, str | None] | None:
    """The text of `data` (the first bytes of a file when `cut`) and a note when it was not UTF-8;
    None for a binary file (a NUL byte and no UTF-16/32 byte-order mark)."""
    for bom, codec, name in _BOMS:  # checked before NULs: UTF-16/32 text is full of them
        if data.startswith(bom):
            try:
                text = codecs.getincrementaldecoder(codec)().decode(data, final=not cut)
            except UnicodeDecodeError:
                break
            return text, f"[read_file: {shown} decoded as {name} (byte-order mark). {_EDIT_NOTE}]"
    if b"\0" in data:
        return None
    try:  # incremental: a cap that falls inside a character is not an error
        return codecs.getincrementaldecoder("utf-8")().decode(data, final=not cut), None
    except UnicodeDecodeError as exc:
        where = f"byte 0x{data[exc.start]:02x} at offset {exc.start}"
    try:
        text, codec = data.decode("cp1252"), "cp1252"
    except UnicodeDecodeError:  # 0x81 0x8d 0x8f 0x90 0x9d are undefined in cp1252
        text, codec = data.decode("latin-1"), "latin-1"
    return text, f"[read_file: {shown} is not UTF-8 ({where}); decoded as {codec}, a guess. {_EDIT_NOTE}]"


_EDIT_NOTE = "edit_file refuses it: it only edits UTF-8 files"


@tool
def read_file(path: str, start_line: int | None = None, end_line: int | None = None) -> str:
    """Read a text file from the workspace.

    Text is decoded as UTF-8. A file with a UTF-16/32 byte-order mark is decoded as such; any other
    file that is not valid UTF-8 is decoded as cp1252 (latin-1 if cp1252 cannot) rather than shown
    with replacement characters, and the result then starts with one `[read_file: … decoded as …]`
    line saying so. A file with NUL bytes is binary and not read. At most 512 KiB are read.

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
    cut = len(data) > MAX_READ_BYTES
    decoded = _decode(data[:MAX_READ_BYTES], cut, file.relative_to(workspace_root()).as_posix())
    if decoded is None:
        raise ToolError(f"{path!r} is a binary file ({size} bytes); not read")
    text, note = decoded
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
    return body if note is None else f"{note}\n{body}"


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
