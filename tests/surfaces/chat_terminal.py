"""`crow chat` as a real subprocess on a pseudo-terminal, for tests of what only a terminal shows.

    with ChatTerminal(["--base-url", url, ...], cwd=tmp_path) as term:
        term.expect("› ")          # the prompt is up
        term.send("hello\\r")       # keys, as typed (Enter is \\r, Ctrl-C \\x03, Ctrl-D \\x04)
        term.expect("Hello!")
        term.signal(signal.SIGTERM)
        code = term.wait()

The screen text is the child's output with escape sequences removed. stderr is a pipe of its own
(`term.stderr()` once the process ended), so a traceback cannot hide in the redrawn screen.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import re
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path
from types import TracebackType

CROW = str(Path(sys.executable).with_name("crow"))
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-Za-z]|\x1b[=>78]")


class ChatTerminal:
    """`crow chat ARGS` (or another `command`) on a 100x30 pseudo-terminal (stdin and stdout; stderr is a
    pipe unless `stderr_on_terminal`)."""

    def __init__(self, args: list[str], *, cwd: Path, env: dict[str, str] | None = None, command: str = "chat",
                 stderr_on_terminal: bool = False) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
        environ = {**os.environ, "TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1", **(env or {})}
        environ.pop("NO_COLOR", None)
        self.proc = subprocess.Popen([CROW, command, *args], cwd=cwd, env=environ, stdin=slave, stdout=slave,
                                     stderr=slave if stderr_on_terminal else subprocess.PIPE, start_new_session=True)
        os.close(slave)
        self.master: int | None = master
        self._raw = bytearray()
        self._lock = threading.Lock()
        self._mark = 0
        self._reader = threading.Thread(target=self._read, args=(master,), daemon=True)
        self._reader.start()

    def _read(self, fd: int) -> None:
        while True:
            try:
                data = os.read(fd, 65536)
            except OSError:  # EIO: the child closed the terminal, or we hung it up
                return
            if not data:
                return
            with self._lock:
                self._raw += data

    def screen(self) -> str:
        """Everything shown so far, escape sequences removed."""
        with self._lock:
            raw = bytes(self._raw)
        return _ESCAPES.sub("", raw.decode("utf-8", "replace"))

    def expect(self, text: str, timeout: float = 20.0) -> None:
        """Wait until `text` shows after what earlier `expect` calls matched; AssertionError after `timeout` s."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = self.screen()
            at = screen.find(text, self._mark)
            if at >= 0:
                self._mark = at + len(text)
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        raise AssertionError(f"{text!r} not shown (exit code {self.proc.poll()}); screen:\n{self.screen()}")

    def send(self, keys: str) -> None:
        assert self.master is not None
        os.write(self.master, keys.encode())

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def hang_up(self) -> None:
        """Close the terminal (the master side), as a closed terminal window does, then send SIGHUP."""
        if self.master is not None:
            os.close(self.master)
            self.master = None
        self.proc.send_signal(signal.SIGHUP)

    def wait(self, timeout: float = 30.0) -> int:
        return self.proc.wait(timeout)

    def stderr(self) -> str:
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode("utf-8", "replace")

    def __enter__(self) -> ChatTerminal:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if self.master is not None:
            with contextlib.suppress(OSError):
                os.close(self.master)
            self.master = None
        if self.proc.stderr is not None:
            self.proc.stderr.close()
