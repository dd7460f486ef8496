"""SIGINT / SIGTERM / SIGHUP → what the driver stops, so a run ends cleanly instead of being killed.

`Interrupts` is the one place crow handles signals (the driver's runs stop through it; surfaces only
choose a policy, `driver.run_interrupts` …). The first signal stops the run (the stream is closed,
running tools are cancelled, the history is closed); the exit code is 128 + signal (130 SIGINT, 143
SIGTERM, 129 SIGHUP). A second signal exits at once. A tool running in a worker thread cannot be
interrupted: with `exit_grace_s` set, the process exits that many seconds later instead of waiting for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import Any

__all__ = ["ALL_SIGNALS", "Interrupts", "exit_code", "exit_now", "signal_name"]

ALL_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # SIGHUP: the terminal was closed


def exit_code(signum: int) -> int:
    """128 + the signal number (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP)."""
    return 128 + signum


def signal_name(signum: int) -> str:
    """`SIGINT`, `SIGTERM` …"""
    return signal.Signals(signum).name


class Interrupts:
    """The process's signals for a surface's lifetime: what a signal stops, and when the process ends.

    Entered once by the surface's main task (asyncio signal handlers: main thread only; elsewhere
    nothing is installed). While a `stopping(stop)` block runs (the driver's run, chat's /compact),
    a signal calls `stop(signum)`; the innermost block wins.

    - An `end` signal (SIGTERM, SIGHUP; SIGINT for `crow run` and `crow acp`) stops what runs, or with nothing
      running cancels the task that entered; `signum` records it and the exit code is 128 + n.
    - A `stop` signal (chat's SIGINT: Ctrl-C stops the turn) stops what runs and the surface goes on;
      with nothing (more) to stop, it ends the surface as an `end` signal does.
    - Once the surface is ending, another signal exits at once.

    Args:
        end: signals that end the surface.
        stop: signals that stop what runs and end the surface only when nothing runs.
        exit_grace_s: after an `end` signal, once what it stopped has ended, the process exits this many
            seconds later even if a tool thread still runs (None: never forced; in-process callers).

    Attributes:
        signum: the first `end` signal received, or None.
    """

    def __init__(self, *, end: Iterable[int] = ALL_SIGNALS, stop: Iterable[int] = (),
                 exit_grace_s: float | None = None) -> None:
        self.end = tuple(end)
        self.stop = tuple(stop)
        self.exit_grace_s = exit_grace_s
        self.signum: int | None = None
        self._stoppers: list[Callable[[int], bool]] = []
        self._task: asyncio.Task[Any] | None = None
        self._installed: list[int] = []
        self._timer: threading.Timer | None = None

    @property
    def name(self) -> str:
        """`SIGTERM` … for the first `end` signal; "" when none came."""
        return signal_name(self.signum) if self.signum else ""

    @property
    def exit_code(self) -> int:
        """128 + the first `end` signal (0 when none came)."""
        return exit_code(self.signum) if self.signum else 0

    def __enter__(self) -> Interrupts:
        loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        for sig in dict.fromkeys((*self.end, *self.stop)):
            try:
                loop.add_signal_handler(sig, self._handle, sig)
            except (NotImplementedError, RuntimeError, ValueError):  # Windows, or not the main thread
                continue
            self._installed.append(sig)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool:
        loop = asyncio.get_running_loop()
        for sig in self._installed:
            loop.remove_signal_handler(sig)
            if self.signum is not None and self.exit_grace_s is not None:  # a process shutting down after a
                # signal (not an in-process caller): another one still exits at once, with 128 + n
                signal.signal(sig, lambda received, _frame: exit_now(exit_code(received)))
        self._installed.clear()
        self._exit_soon()
        return False  # what ended the block goes on (`driver.RunScope` takes its own cancellation back)

    @contextlib.contextmanager
    def stopping(self, stop: Callable[[int], bool]) -> Iterator[None]:
        """While the block runs, a signal calls `stop(signum)`; when it returns False (nothing was left to
        stop), an `end` signal cancels the surface's task all the same."""
        self._stoppers.append(stop)
        try:
            yield
        finally:
            self._stoppers.remove(stop)
            self._exit_soon()  # what the signal stopped has ended: a tool thread may not, do not wait for it

    def _handle(self, sig: int) -> None:
        if self.signum is not None:  # a second signal once the surface is ending: the user means it
            exit_now(exit_code(sig))
        if self._stoppers and self._stoppers[-1](sig):
            if sig in self.end:
                self.signum = sig
            return
        self.signum = sig  # nothing (more) to stop: the surface ends
        if self._task is not None:
            self._task.cancel()

    def _exit_soon(self) -> None:
        """Exit `exit_grace_s` seconds from now (once) unless the process has ended by then (a daemon timer)."""
        if self.exit_grace_s is None or self.signum is None or self._timer is not None:
            return
        self._timer = threading.Timer(self.exit_grace_s, exit_now, (self.exit_code,))
        self._timer.daemon = True
        self._timer.start()


def exit_now(code: int) -> None:
    """Flush what can be flushed and end the process with `code`, whatever threads still run."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
