"""SIGINT / SIGTERM / SIGHUP → a callback, so a run ends cleanly instead of being killed.

The first signal calls the callback (the driver cancels its run: the stream is closed, running tools
are cancelled, the history is closed); the exit code is 128 + signal (130 SIGINT, 143 SIGTERM, 129
SIGHUP). A second signal exits at once. A tool running in a worker thread cannot be interrupted: with
`exit_grace_s` set, `exit_soon` exits that many seconds later instead of waiting for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from types import TracebackType

__all__ = ["ALL_SIGNALS", "SignalCancel", "exit_code", "signal_name"]

ALL_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # SIGHUP: the terminal was closed


def exit_code(signum: int) -> int:
    """128 + the signal number (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP)."""
    return 128 + signum


def signal_name(signum: int) -> str:
    """`SIGINT`, `SIGTERM` …"""
    return signal.Signals(signum).name


class SignalCancel:
    """While entered, `signals` call `on_signal(signum)` (asyncio signal handlers, main thread only).

    Args:
        on_signal: called with the first signal received; a second one exits the process at once.
        exit_grace_s: for `exit_soon`; None never forces an exit (in-process callers, tests).
        signals: the signals to handle.

    Attributes:
        signum: the first signal received, or None.
    """

    def __init__(self, on_signal: Callable[[int], object], *, exit_grace_s: float | None = None,
                 signals: Iterable[int] = ALL_SIGNALS) -> None:
        self.on_signal = on_signal
        self.exit_grace_s = exit_grace_s
        self.signals = tuple(signals)
        self.signum: int | None = None
        self._installed: list[int] = []

    @property
    def name(self) -> str:
        return signal_name(self.signum) if self.signum else ""

    @property
    def exit_code(self) -> int:
        return exit_code(self.signum or signal.SIGINT)

    def __enter__(self) -> SignalCancel:
        loop = asyncio.get_running_loop()
        for sig in self.signals:
            try:
                loop.add_signal_handler(sig, self._handle, sig)
            except (NotImplementedError, RuntimeError, ValueError):  # Windows, or not the main thread
                continue
            self._installed.append(sig)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        loop = asyncio.get_running_loop()
        for sig in self._installed:
            loop.remove_signal_handler(sig)
            if self.signum is not None and self.exit_grace_s is not None:  # a process shutting down after a
                # signal (not an in-process caller): another one still exits at once, with 128 + n
                signal.signal(sig, lambda received, _frame: exit_now(exit_code(received)))
        self._installed.clear()

    def _handle(self, sig: int) -> None:
        if self.signum is not None:  # a second signal: the user means it
            exit_now(exit_code(sig))
        self.signum = sig
        self.on_signal(sig)

    def exit_soon(self) -> None:
        """Exit `exit_grace_s` seconds from now unless the process has ended by then (a daemon timer)."""
        if self.exit_grace_s is None or self.signum is None:
            return
        timer = threading.Timer(self.exit_grace_s, exit_now, (self.exit_code,))
        timer.daemon = True
        timer.start()


def exit_now(code: int) -> None:
    """Flush what can be flushed and end the process with `code`, whatever threads still run."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
