"""Read-only file tools, confined to the workspace."""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from ...atomic import file_kind
from ...errors import ToolError
from ...images import MAX_IMAGE_BYTES, Image, image_type
from ...text import BOMS
from ..tool import tool
from ..workspace import resolve_for_read, shown_path

__all__ = ["BOMS", "MAX_RETURN_CHARS", "SNIFF_BYTES", "check_line_range", "file_type", "list_directory", "read_file",
           "require_regular_file"]

SNIFF_BYTES = 512 * 1024
"""How much of a file's start is examined to tell text from binary and choose the encoding."""
MAX_RETURN_CHARS = 40_000
"""Characters of file text one read_file call returns at most: under the default dispatch cap
(`max_output_chars`, 50 000) so the whole answer, notes included, reaches the model."""
MAX_ENTRIES = 1000


def _sniff(data: bytes, cut: bool, shown: str) -> tuple[str, str | None] | None:
    """The codec for a file whose first bytes are `data` (all of it unless `cut`) and a note when it is
    not UTF-8; None for a binary file (a NUL byte and no UTF-16/32 byte-order mark)."""
    for bom, codec, name in BOMS:  # checked before NULs: UTF-16/32 text is full of them
        if data.startswith(bom):
            try:
                codecs.getincrementaldecoder(codec)().decode(data, final=not cut)
            except UnicodeDecodeError:
                break
            return codec, f"[read_file: {shown} decoded as {name} (byte-order mark). {_EDIT_NOTE}]"
    if b"\0" in data:
        return None
    try:  # incremental: a cap that falls inside a character is not an error
        codecs.getincrementaldecoder("utf-8")().decode(data, final=not cut)
        return "utf-8", None
    except UnicodeDecodeError as exc:
        where = f"byte 0x{data[exc.start]:02x} at offset {exc.start}"
    try:
        data.decode("cp1252")
        codec = "cp1252"
    except UnicodeDecodeError:  # 0x81 0x8d 0x8f 0x90 0x9d are undefined in cp1252
        codec = "latin-1"
    return codec, f"[read_file: {shown} is not UTF-8 ({where}); decoded as {codec}, a guess. {_EDIT_NOTE}]"


_EDIT_NOTE = "edit_file refuses it: it only edits UTF-8 files"


def check_line_range(start_line: int | None, end_line: int | None) -> None:
    """Refuse line numbers below 1 and an end before the start, as codex's read_file refuses an offset
    below 1 (`codex-rs/core/src/tools/handlers/read_file.rs`): such a range is a mistake, not a request."""
    for name, value in (("start_line", start_line), ("end_line", end_line)):
        if value is not None and value < 1:
            raise ToolError(f"{name} must be 1 or more (lines are numbered from 1); got {value}")
    if start_line is not None and end_line is not None and end_line < start_line:
        raise ToolError(f"end_line {end_line} is before start_line {start_line}")


_PIECE_CHARS = 65_536
"""A line is read in pieces of at most this many characters: a huge line is never held whole."""


def _pieces(fh: TextIO) -> Iterator[tuple[str, bool]]:
    """The file's text in pieces of at most `_PIECE_CHARS` (plus one), each with whether it ends its line."""
    while True:
        piece = fh.readline(_PIECE_CHARS)
        if not piece:
            return
        if piece.endswith("\r") and len(piece) == _PIECE_CHARS:  # a CRLF may straddle the limit
            mark = fh.tell()
            if fh.read(1) == "\n":
                piece += "\n"
            else:
                fh.seek(mark)
        yield piece, piece.endswith(("\n", "\r"))


def file_type(path: Path) -> str:
    """What a path that is not a regular file is, for refusals: "a directory", "a FIFO (named pipe)" ..."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return "missing"
    return file_kind(mode)


def require_regular_file(file: Path, path: str) -> None:
    """Refuse anything but an existing regular file (reading a FIFO or a device could block for ever).

    Raises:
        ToolError: `path` does not exist, or is a directory, FIFO, socket or device (named in the message).
    """
    if not file.is_file():
        what = file_type(file)
        raise ToolError(f"{path!r} does not exist" if what == "missing" else f"{path!r} is {what}, not a file")


@tool(kind="read")
def read_file(path: str, start_line: int | None = None, end_line: int | None = None,
              start_char: int = 0) -> str | Image:
    """Read a text file from the workspace, or a range of its lines; an image file (PNG, JPEG, GIF, WebP) is shown.

    One call returns at most 40 000 characters, in whole lines: a longer range starts with a `[read_file: …]`
    note giving the `start_line` (in a longer line, the `start_char`) to read on from. A file that is not
    UTF-8 is decoded as cp1252 and the result says so; a binary file is not read.

    Args:
        path: file path, relative to the workspace root.
        start_line: first line to return, 1-based.
        end_line: last line to return, inclusive (past the end: the end).
        start_char: characters of start_line to skip, to read on in a line longer than one call returns.
    """
    file = resolve_for_read(path)
    require_regular_file(file, path)
    check_line_range(start_line, end_line)
    if start_char < 0:
        raise ToolError(f"start_char must be 0 or more (an offset into start_line); got {start_char}")
    shown = shown_path(file)
    size = file.stat().st_size
    with file.open("rb") as raw:
        head = raw.read(SNIFF_BYTES + 1)
    if image_type(head) is not None:  # a vision model sees it (`images`); a text-only one reads its name
        if size > MAX_IMAGE_BYTES:
            raise ToolError(f"{path!r} is an image of {size:,} bytes; images are shown up to {MAX_IMAGE_BYTES:,}")
        return Image(file.read_bytes(), name=shown)
    sniffed = _sniff(head[:SNIFF_BYTES], len(head) > SNIFF_BYTES, shown)
    if sniffed is None:
        raise ToolError(f"{path!r} is a binary file ({size} bytes); not read")
    codec, note = sniffed
    first = start_line or 1
    picked: list[str] = []  # what is returned: whole lines, or the part of one long line
    used = ended = last_shown = 0
    open_line = False  # the last piece read did not end its line
    current: list[str] = []  # the parts of the line being collected
    current_chars = skipped = 0
    long_line: tuple[int, int] | None = None  # (number, characters shown) of a first line cut at the cap
    long_length = 0  # that line's whole length, counted while streaming
    collecting = True  # until the cap is reached
    # streamed in pieces: the cap limits what is returned, not which lines (or parts) can be reached
    with file.open("r", encoding=codec, errors="replace", newline="") as fh:
        for piece, ends in _pieces(fh):
            number = ended + 1
            ended += ends
            open_line = not ends
            if long_line is not None and long_line[0] == number:
                long_length += len(piece)
            if not collecting or number < first or (end_line is not None and number > end_line):
                continue
            if number == first and skipped < start_char:
                cut = piece[: start_char - skipped]
                skipped += len(cut)
                piece = piece[len(cut):]
            current.append(piece)
            current_chars += len(piece)
            if used + current_chars > MAX_RETURN_CHARS:
                collecting = False
                if not picked:  # a single line longer than the cap: its first part
                    picked.append("".join(current)[:MAX_RETURN_CHARS])
                    long_line = (number, MAX_RETURN_CHARS)
                    long_length = current_chars + (skipped if number == first else 0)
                continue
            if ends:
                picked.append("".join(current))
                used += current_chars
                last_shown = number
                current, current_chars = [], 0
        if collecting and current:  # a last line without a line ending
            picked.append("".join(current))
            last_shown = ended + 1
    total = ended + open_line
    full = collecting
    counted = f"{total} line" if total == 1 else f"{total} lines"
    if first > total and (start_line is not None or end_line is not None):
        raise ToolError(f"{path!r} has {counted}; start_line {first} is past the end")
    notes = [note] if note else []
    if long_line is not None:
        number, taken = long_line
        begin = start_char if number == first else 0
        rest = (f"read on with start_line={number}, start_char={begin + taken}" if begin + taken < long_length
                else f"read on with start_line={number + 1}")
        notes.append(f"[read_file: {shown} has {counted} ({size} bytes); line {number} is {long_length} characters "
                     f"long: characters {begin + 1}–{begin + taken} are shown; {rest}]")
    elif not full:
        notes.append(f"[read_file: {shown} has {counted} ({size} bytes); showing lines {first}–{last_shown} "
                     f"(at most {MAX_RETURN_CHARS} characters per call); read on with start_line={last_shown + 1}]")
    body = "".join(picked)
    return "\n".join([*notes, body]) if notes else body


@tool(kind="read")
def list_directory(path: str = ".") -> str:
    """List a directory of the workspace: one entry per line, directories end with `/`.

    Args:
        path: directory path, relative to the workspace root.
    """
    folder = resolve_for_read(path)
    if not folder.is_dir():
        raise ToolError(f"{path!r} is not a directory")
    entries = sorted(folder.iterdir(), key=lambda p: (not p.is_dir(), p.name))
    lines = [p.name + ("/" if p.is_dir() else "") for p in entries[:MAX_ENTRIES]]
    if len(entries) > MAX_ENTRIES:
        lines.append(f"[… {len(entries) - MAX_ENTRIES} more entries]")
    shown = shown_path(folder)
    return f"{shown}/ ({len(entries)} entries)\n" + "\n".join(lines) if lines else f"{shown}/ is empty"
