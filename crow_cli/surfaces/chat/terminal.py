"""The chat's terminal: the input history file (bounded), the key bindings, the piped reader and the echo
switched off while a turn runs (termios)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ...atomic import write_atomic
from ...private import private_dir, private_file
from ..ask import typed_keys

MAX_HISTORY_ENTRY_CHARS = 4096
"""Longer inputs (pastes) are not kept in the input history."""
MAX_HISTORY_BYTES = 512 * 1024
"""The input history file is cut to its newest entries within this size when a chat starts."""


def input_history() -> Any:
    """prompt-toolkit's `FileHistory` on `_history_path()`, bounded: pastes over 4096 characters are not
    kept, and a file grown past 512 KiB is cut to its newest entries (atomically) before it is loaded. The
    history is a convenience: a file that cannot be read or written (a folder in its place, a full disk)
    leaves the chat without it (in memory only), never stops it."""
    from prompt_toolkit.history import FileHistory, InMemoryHistory

    class BoundedHistory(FileHistory):
        def load_history_strings(self) -> Iterable[str]:
            _trim_history(Path(os.fsdecode(self.filename)))
            try:
                return list(super().load_history_strings())
            except OSError:
                return []

        def store_string(self, string: str) -> None:
            if len(string) <= MAX_HISTORY_ENTRY_CHARS:
                with contextlib.suppress(OSError):
                    super().store_string(string)

    try:
        return BoundedHistory(str(_history_path()))
    except OSError:  # the state folder cannot be made (a file in its place)
        return InMemoryHistory()


def _trim_history(path: Path, limit: int = MAX_HISTORY_BYTES) -> None:
    """Cut prompt-toolkit's history file (entries start with a `# <date>` line) to its newest entries
    within `limit` bytes; it is read only from where those start."""

    try:
        size = path.stat().st_size
        if size <= limit:
            return
        with path.open("rb") as fh:
            fh.seek(size - limit)
            tail = fh.read()
        start = tail.find(b"\n# ")
        write_atomic(path, tail[start + 1:] if start >= 0 else b"", private=True)
    except OSError:
        pass  # the history is a convenience: a chat starts without it


def _history_path() -> Path:
    import platformdirs


    return private_file(private_dir(Path(platformdirs.user_state_dir("crow", appauthor=False))) / "chat_history")


async def read_piped_line() -> str:
    """The next line of piped standard input, without its line end (bytes decoded here: a non-UTF-8 byte is
    U+FFFD). Every piped read goes through here: messages and approval answers share one buffer.

    Raises:
        EOFError: the input ended.
    """
    raw = getattr(sys.stdin, "buffer", None)
    line = (await asyncio.to_thread(raw.readline)).decode("utf-8", "replace") if raw is not None \
        else await asyncio.to_thread(sys.stdin.readline)
    if not line:
        raise EOFError
    return str(line).rstrip("\n")


def key_bindings() -> Any:
    bindings = typed_keys()

    @bindings.add("escape", "enter")  # Alt-Enter; plain \n stays Enter (typed-ahead lines arrive as \n)
    def _newline(event: Any) -> None:
        event.current_buffer.insert_text("\n")

    return bindings


@contextmanager
def no_echo(enabled: bool) -> Iterator[None]:
    """While a turn runs, keys typed ahead are not echoed and are kept as typed (read at the next prompt).

    An echoed `^C` or typed-ahead text would also shift the live area and leave stray lines. Canonical mode is
    off too: there Ctrl-D is no key but an end of line that no later read sees, so a Ctrl-D typed during a
    turn was lost and the chat did not quit.
    """
    if not enabled or not sys.stdin.isatty():
        yield
        return
    import termios

    fd = sys.stdin.fileno()
    try:
        saved = termios.tcgetattr(fd)
    except termios.error:
        yield
        return
    quiet = list(saved)
    quiet[3] &= ~(termios.ECHO | getattr(termios, "ECHOCTL", 0) | termios.ICANON)
    termios.tcsetattr(fd, termios.TCSANOW, quiet)
    try:
        yield
    finally:
        with contextlib.suppress(termios.error):  # the terminal is gone (SIGHUP)
            termios.tcsetattr(fd, termios.TCSANOW, saved)

