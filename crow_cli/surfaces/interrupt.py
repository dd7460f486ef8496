"""SIGINT / SIGTERM / SIGHUP → cancel the running task, so a run ends cleanly instead of being killed.

The first signal cancels the task (the stream is closed, running tools are cancelled) and the
surface closes the history and reports `cancelled`; exit code 128 + signal (130 SIGINT, 143 SIGTERM,
129 SIGHUP).
A second signal exits at once. A tool running in a worker thread cannot be interrupted: with
`exit_grace_s` set, the process exits that many seconds after cleanup instead of waiting for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterable
from types import TracebackType
from typing import Any

__all__ = ["SignalCancel"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # SIGHUP: the terminal was closed


class SignalCancel:
    """While entered, SIGINT, SIGTERM and SIGHUP cancel `task` (asyncio signal handlers, main thread only).

    Args:
        task: the task to cancel on the first signal.
        exit_grace_s: for `exit_soon`; None never forces an exit (in-process callers, tests).
        signals: the signals to handle (`crow chat` leaves SIGINT to its own handler).

    Attributes:
        signum: the first signal received, or None.
    """

    def __init__(self, task: asyncio.Future[Any], *, exit_grace_s: float | None = None,
                 signals: Iterable[int] = _SIGNALS) -> None:
        self.task = task
        self.exit_grace_s = exit_grace_s
        self.signals = tuple(signals)
        self.signum: int | None = None
        self._installed: list[int] = []

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else ""

    @property
    def exit_code(self) -> int:
        """128 + the signal number (130 for SIGINT, 143 for SIGTERM)."""
        return 128 + (self.signum or signal.SIGINT)

    def __enter__(self) -> SignalCancel:
        loop = asyncio.get_running_loop()
        for sig in self.signals:
            try:
                loop.add_signal_handler(sig, self._on_signal, sig)
            except (NotImplementedError, RuntimeError, ValueError):  # Windows, or not the main thread
                continue
            self._installed.append(sig)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        loop = asyncio.get_running_loop()
        for sig in self._installed:
            loop.remove_signal_handler(sig)
        self._installed.clear()

    def _on_signal(self, sig: int) -> None:
        if self.signum is not None:  # a second signal: the user means it
            _exit_now(128 + sig)
        self.signum = sig
        self.task.cancel()

    def exit_soon(self) -> None:
        """Exit `exit_grace_s` seconds from now unless the process has ended by then (a daemon timer)."""
        if self.exit_grace_s is None:
            return
        timer = threading.Timer(self.exit_grace_s, _exit_now, (self.exit_code,))
        timer.daemon = True
        timer.start()


def _exit_now(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
