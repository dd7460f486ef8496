"""A watchdog for async tools that block the event loop (`time.sleep`, a blocking read inside `async def`).

Such a tool stops everything that runs on the loop: the tool timeout, Ctrl-C, the stream, other
tools. Nothing can interrupt it from inside the loop, so a thread watches: `track` runs a tool's
coroutine step by step and notes which tool's code is executing and since when; a step that has
run longer than `BLOCKED_AFTER_S` blocks the loop, and the thread says once which tool does it,
on stderr (the loop itself cannot say anything until the tool yields). It cannot stop the tool:
the timeout and Ctrl-C take effect when the step ends. A well-behaved step returns at once, so
the cost is two attribute writes per step.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, TypeVar

__all__ = ["BLOCKED_AFTER_S", "LoopWatchdog", "track", "watchdog"]

T = TypeVar("T")

BLOCKED_AFTER_S = 2.0
"""A tool step running longer than this (seconds) is blocking the event loop."""


def _to_stderr(message: str) -> None:
    try:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr closed: nothing to tell
        pass


class LoopWatchdog:
    """Watches the steps of tracked tool coroutines from a daemon thread (started on first use).

    Args:
        report: called (from the watchdog's thread) with the one-line warning for a blocking tool.
        blocked_after_s: how long a step may run before it counts as blocking.
    """

    def __init__(self, report: Callable[[str], None] = _to_stderr, blocked_after_s: float = BLOCKED_AFTER_S) -> None:
        self.report = report
        self.blocked_after_s = blocked_after_s
        self._step: tuple[str, float, int] | None = None  # (tool, started at, step number) now executing
        self._steps = 0
        self._reported = -1
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="crow-loop-watchdog", daemon=True)
                self._thread.start()

    def _watch(self) -> None:
        interval = min(0.1, self.blocked_after_s / 4)
        while True:
            time.sleep(interval)
            step = self._step
            if step is None or step[2] == self._reported:
                continue
            name, started, number = step
            blocked = time.monotonic() - started
            if blocked >= self.blocked_after_s:
                self._reported = number
                self.report(f"crow: warning: tool {name!r} has blocked crow for {blocked:.0f} s: it is an async tool "
                            "that runs blocking code (time.sleep, a blocking read) inside async def; its timeout and "
                            "Ctrl-C take effect only when it yields (use await asyncio.sleep, or asyncio.to_thread "
                            "for blocking calls)")

    def executing(self) -> str | None:
        """The tracked tool whose code is running now (None: none; the loop runs something else)."""
        step = self._step
        return step[0] if step is not None else None

    def enter(self, name: str) -> None:
        self._steps += 1
        self._step = (name, time.monotonic(), self._steps)

    def leave(self) -> None:
        self._step = None

    def track(self, name: str, coroutine: Coroutine[Any, Any, T]) -> Awaitable[T]:
        """`coroutine` (tool `name`'s), awaited step by step under watch."""
        self._ensure_thread()
        return _Tracked(self, name, coroutine)


class _Tracked(Awaitable[T]):
    def __init__(self, dog: LoopWatchdog, name: str, coroutine: Coroutine[Any, Any, T]) -> None:
        self.dog, self.name, self.coroutine = dog, name, coroutine

    def __await__(self) -> Generator[Any, Any, T]:
        steps = self.coroutine.__await__()
        send: Any = None
        throw: BaseException | None = None
        while True:
            self.dog.enter(self.name)
            try:
                yielded = steps.send(send) if throw is None else steps.throw(throw)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            finally:
                self.dog.leave()
            try:
                send, throw = (yield yielded), None
            except BaseException as exc:  # cancellation, GeneratorExit: passed into the tool's coroutine
                send, throw = None, exc


watchdog = LoopWatchdog()
"""The process's watchdog (`Tool.invoke` tracks every async tool with it)."""


def track(name: str, coroutine: Coroutine[Any, Any, T]) -> Awaitable[T]:
    """`watchdog.track(name, coroutine)`."""
    return watchdog.track(name, coroutine)
