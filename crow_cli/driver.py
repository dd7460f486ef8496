"""One driver runs the react loop for every surface (run, JSONL, chat, the editor protocol).

    surface ──► Driver.run(history, sink, recorder) ──► react ──► events ──► sink.handle(event)
                  │ signals / cancel() → cancellation          │ MessageAppended → recorder.sync
                  └────────────── RunFinished (status, exit code) ◄┘

The driver adds what every surface needs and none should repeat: a signal (or `cancel()`) cancels
the loop, which closes its own history; each appended message is stored as it is appended; the run
ends with one `RunFinished` whose `exit_code` is the process's (130 / 143 / 129 after a signal).
Surfaces are sinks: they show events and never repair, count or store the history.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
from collections.abc import Iterable
from contextlib import aclosing
from dataclasses import replace
from typing import Protocol

from .context.compact import Compactor
from .errors import SessionError
from .events import Event, MessageAppended, RunFinished, WarningEvent
from .history import Message
from .loop import ChatStream, LoopSettings, react
from .signals import SignalCancel, exit_code, signal_name
from .tools.context import ToolContext
from .tools.dispatch import Approver
from .tools.registry import ToolRegistry

__all__ = ["Driver", "Recorder", "Sink"]


class Sink(Protocol):
    """Where a surface receives the run's events, in order; `handle` must not block."""

    def handle(self, event: Event) -> None: ...


class Recorder(Protocol):
    """Stores a history as it grows (`surfaces.persist.SessionRecorder` is one)."""

    def sync(self, history: list[Message]) -> None:
        """Store what is new in `history`; raises `SessionError` when the store cannot be written."""
        ...


class Driver:
    """Runs `react` for a surface; one run at a time.

    Args:
        client: streams the model's turns.
        registry: the tools offered (None: none).
        settings: loop limits.
        approve: asked before tools that need approval (None denies them).
        context: the workspace and secrets tools run with (None: the working directory, no secrets).
        compactor: keeps the conversation within the context window (None: no compaction).
    """

    def __init__(self, client: ChatStream, registry: ToolRegistry | None, settings: LoopSettings,
                 approve: Approver | None, context: ToolContext | None = None,
                 compactor: Compactor | None = None) -> None:
        self.client = client
        self.context = context
        self.registry = registry
        self.settings = settings
        self.approve = approve
        self.compactor = compactor
        self._task: asyncio.Task[None] | None = None
        self._stop: tuple[str, int] | None = None
        self._finished: RunFinished | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def cancel(self, reason: str = "interrupted", code: int = 130) -> bool:
        """Stop the run in progress: `run` returns `RunFinished("cancelled", error=reason, exit_code=code)`.

        Returns False when no run is in progress (or it is already being stopped).
        """
        if not self.running or self._stop is not None:
            return False
        self._stop = (reason, code)
        assert self._task is not None
        self._task.cancel()
        return True

    async def run(self, history: list[Message], sink: Sink, recorder: Recorder | None = None, *,
                  signals: Iterable[int] = (), exit_grace_s: float | None = None) -> RunFinished:
        """Run the loop on `history` (ending with the user's message) until its `RunFinished`.

        A sink whose output is gone (`OSError` from `handle`: a closed terminal, a closed pipe) gets no
        more events and the run is cancelled: exit code 129 for a terminal that hung up (EIO), 141 for
        a closed pipe (EPIPE), as the signal would have made it; any other error (a full disk) exits 1
        with the error `cannot write the output: STRERROR`, for the surface to print elsewhere.

        Args:
            history: appended to in place; stored through `recorder` first and after every message.
            sink: receives every event, the `RunFinished` last.
            recorder: the session store's writer; after a `SessionError` the run goes on unrecorded
                with a `WarningEvent`.
            signals: while the run lasts, these signals cancel it (`interrupted (SIGINT)`, exit 128 + n);
                a second one exits at once.
            exit_grace_s: after a signal, the process exits this many seconds later even if a tool
                thread still runs (None: never forced).

        Raises:
            asyncio.CancelledError: when the caller's task is cancelled; the history is closed and
                stored first, and the sink has seen the closing events.
        """
        self._stop, self._finished = None, None
        recorder = self._store(recorder, history, sink)
        self._task = asyncio.ensure_future(self._consume(history, sink, recorder))

        def on_signal(signum: int) -> None:
            self.cancel(f"interrupted ({signal_name(signum)})", exit_code(signum))

        with SignalCancel(on_signal, signals=signals, exit_grace_s=exit_grace_s) as trap:
            try:
                await self._task
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if self._stop is None or (current is not None and current.cancelling()):
                    raise
            finally:
                self._task = None
                self._store(recorder, history, sink)  # whatever ended the run, what the loop closed is kept
            if trap.signum is not None:
                trap.exit_soon()  # a tool in a worker thread may not stop; do not wait for it
        if self._finished is None:  # stopped before the loop began: nothing to close, still one RunFinished
            assert self._stop is not None  # otherwise react ended with its own RunFinished
            self._finished = RunFinished("cancelled", "", 0, *self._stop)
            with contextlib.suppress(OSError):
                sink.handle(self._finished)
        return self._finished

    async def _consume(self, history: list[Message], sink: Sink | None, recorder: Recorder | None) -> None:
        async with aclosing(react(history, self.client, self.registry, self.settings, self.approve,
                                  self.context, self.compactor)) as events:
            async for event in events:
                if isinstance(event, MessageAppended):
                    recorder = self._store(recorder, history, sink)
                elif isinstance(event, RunFinished):
                    if event.status == "cancelled" and self._stop is not None:
                        event = replace(event, error=self._stop[0], exit_code=self._stop[1])
                    self._finished = event
                if sink is not None:
                    try:
                        sink.handle(event)
                    except OSError as exc:  # the terminal or pipe is gone (a closed window, `| head`)
                        sink = None
                        if exc.errno == errno.EIO:  # a terminal that hung up: as if SIGHUP had come first
                            self.cancel("the terminal was closed", 129)
                        elif exc.errno == errno.EPIPE:  # a closed pipe: as if SIGPIPE had killed us
                            self.cancel("the output was closed", 141)
                        else:  # a full disk (ENOSPC), a quota …: the surface says it, the run failed
                            self.cancel(f"cannot write the output: {exc.strerror or exc}", 1)

    @staticmethod
    def _store(recorder: Recorder | None, history: list[Message], sink: Sink | None) -> Recorder | None:
        if recorder is None:
            return None
        try:
            recorder.sync(history)
        except SessionError as exc:
            if sink is not None:
                with contextlib.suppress(OSError):
                    sink.handle(WarningEvent(f"{exc}; the rest of this session is not recorded"))
            return None
        return recorder
