"""One driver runs the react loop for every surface (run, JSONL, chat, the editor protocol).

    surface ──► Driver.run(history, sink, recorder) ──► react ──► events ──► sink.handle(event)
                  │ signals / cancel() → cancellation          │ MessageAppended → recorder.sync
                  └────────────── RunFinished (status, exit code) ◄┘

The driver adds what every surface needs and none should repeat (cancellation, storing, lost output, the exit
code: `Driver` tells each); the signal policies are here too (`RunScope`). Surfaces are sinks: they show
events and never repair, count or store the history, install a signal handler, take a cancellation back or
read an errno.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import signal
from contextlib import aclosing, nullcontext
from dataclasses import replace
from types import TracebackType
from typing import Any, Protocol

from .context.compact import Compactor
from .errors import SessionError
from .events import Event, MessageAppended, RunFinished, WarningEvent
from .history import Message
from .loop import INTERRUPTED, ChatStream, LoopSettings, react
from .signals import ALL_SIGNALS, Interrupts, exit_code, signal_name
from .tools.context import ToolContext
from .tools.dispatch import Approver
from .tools.registry import ToolRegistry

OUTPUT_LOST_NOTE = "interrupted: the output could not be written"
"""How a partial answer stored after its output vanished ends (the user did not stop it)."""

__all__ = ["Driver", "Interrupts", "Recorder", "RunScope", "Sink", "chat_interrupts", "editor_interrupts",
           "output_lost", "run_interrupts"]


def _by_signal(signum: int) -> RunFinished:
    """How a run (or a surface) that signal `signum` stopped ends: cancelled, exit 128 + n."""
    return RunFinished("cancelled", "", 0, f"interrupted ({signal_name(signum)})", exit_code(signum), signal=signum)


class RunScope(Interrupts):
    """A surface's whole run under its signal policy (`run_interrupts`, `chat_interrupts`, `editor_interrupts`).

    The surface's main task enters it once around everything it does: set-up (the session read, MCP
    servers starting, the client built), each `Driver.run` (given the scope as its `interrupts`) and the
    way out. A signal while a run lasts stops that run (`RunFinished.signal`); an `end` signal with
    nothing to stop cancels the surface's task, and leaving the scope takes that cancellation back, so
    the code after the `with` block runs and reads `finished`. Any other cancellation passes through.

    A surface enters its `RunScope` once around all it does (set-up, MCP servers starting, every run) and reads
    how a signal ended it from `RunScope.finished`:

        with run_interrupts(grace) as scope:                 set-up, then driver.run(...) (interrupts=scope)
            ...
        scope.finished                                       RunFinished(signal=n, exit_code=128 + n), or None
    """

    _entered: asyncio.Task[Any] | None = None

    def __enter__(self) -> RunScope:
        self._entered = asyncio.current_task()
        super().__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool:
        task = self._entered
        absorbed = isinstance(exc, asyncio.CancelledError) and self.signum is not None and task is not None
        if absorbed and task is not None:
            task.uncancel()  # the cancellation the end signal made: the surface ends by it, not by an exception
        super().__exit__(exc_type, exc, tb)
        return absorbed

    @property
    def finished(self) -> RunFinished | None:
        """How the signal that ended the surface ends its run: `RunFinished("cancelled", error="interrupted
        (SIGTERM)", exit_code=143, signal=15)`; None when no `end` signal came."""
        return None if self.signum is None else _by_signal(self.signum)


def run_interrupts(exit_grace_s: float | None = None) -> RunScope:
    """`crow run`'s policy: SIGINT, SIGTERM and SIGHUP end it (the run, or its set-up, is stopped; exit
    128 + n); a second signal exits at once; `exit_grace_s` after the run a tool thread is not waited for."""
    return RunScope(end=ALL_SIGNALS, exit_grace_s=exit_grace_s)


def chat_interrupts() -> RunScope:
    """`crow chat`'s policy: Ctrl-C (SIGINT) stops the turn (or /compact) and the chat goes on; with nothing
    to stop (start-up, piped input, a turn already stopping) it ends the chat, exit 130. At the prompt the
    terminal reads Ctrl-C as a key (twice in a row quits). SIGTERM and SIGHUP end the chat."""
    return RunScope(end=(signal.SIGTERM, signal.SIGHUP), stop=(signal.SIGINT,))


def editor_interrupts() -> RunScope:
    """`crow acp`'s policy: SIGTERM, SIGHUP and SIGINT (Ctrl-C where it runs by hand) end the connection as the
    end of stdin does (prompts are stopped, answered and stored first; exit 128 + n); a second one exits at once."""
    return RunScope(end=ALL_SIGNALS)


def output_lost(exc: OSError, final_text: str = "", turns: int = 0) -> RunFinished:
    """How a run ends when its output cannot be written (`exc` from a write).

    EIO (a terminal that hung up) exits 129 and EPIPE (a closed pipe) 141, as the signal would have made
    it (`RunFinished.output_gone`); any other error (ENOSPC: a full disk, a quota) exits 1 with the error
    `cannot write the output: STRERROR`, for the surface to print elsewhere.
    """
    if exc.errno == errno.EIO:
        reason, code = "the terminal was closed", 129
    elif exc.errno == errno.EPIPE:
        reason, code = "the output was closed", 141
    else:
        reason, code = f"cannot write the output: {exc.strerror or exc}", 1
    return RunFinished("cancelled", final_text, turns, reason, code, output_errno=exc.errno or 0)


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

    A signal (through the surface's `RunScope`) or `cancel()` cancels the loop, which closes its own history;
    each appended message is stored as it is appended; output that cannot be written stops the run
    (`output_lost`); the run ends with one `RunFinished` whose cause is typed (`status`, `signal`,
    `output_errno`) and whose `exit_code` is the process's (130 / 143 / 129 after a signal, 141 / 129 when the
    pipe or terminal went away).

    Args:
        client: streams the model's turns.
        registry: the tools offered (None: none).
        settings: loop limits.
        approve: asked before tools that need approval (None denies them).
        context: the workspace and secrets tools run with (None: the working directory, no secrets).
        compactor: keeps the conversation within the context window (None: no compaction).
        interrupts: the surface's signals (`run_interrupts` …): while a run lasts, a signal stops it
            (`RunFinished.signal`). None: signals are not the driver's (in-process callers, editor sessions).
    """

    def __init__(self, client: ChatStream, registry: ToolRegistry | None, settings: LoopSettings,
                 approve: Approver | None, context: ToolContext | None = None,
                 compactor: Compactor | None = None, interrupts: Interrupts | None = None) -> None:
        self.client = client
        self.interrupts = interrupts
        self.context = context
        self.registry = registry
        self.settings = settings
        self.approve = approve
        self.compactor = compactor
        self._task: asyncio.Task[None] | None = None
        self._stop: RunFinished | None = None
        self._finished: RunFinished | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def cancel(self, reason: str = "interrupted", code: int = 130) -> bool:
        """Stop the run in progress: `run` returns `RunFinished("cancelled", error=reason, exit_code=code)`.

        Returns False when no run is in progress (or it is already being stopped).
        """
        return self._cancel(RunFinished("cancelled", "", 0, reason, code))

    def _cancel(self, stop: RunFinished, note: str = INTERRUPTED) -> bool:
        if not self.running or self._stop is not None:
            return False
        self._stop = stop
        assert self._task is not None
        self._task.cancel(note)  # the loop ends a partial answer with this note
        return True

    async def run(self, history: list[Message], sink: Sink, recorder: Recorder | None = None) -> RunFinished:
        """Run the loop on `history` (ending with the user's message) until its `RunFinished`.

        A sink whose output is gone (`OSError` from `handle`: a closed terminal, a closed pipe) gets no
        more events and the run is cancelled as `output_lost` says (`RunFinished.output_errno`). While
        the run lasts, a signal of the driver's `interrupts` stops it (`RunFinished.signal`, exit 128 + n).

        Args:
            history: appended to in place; stored through `recorder` first and after every message.
            sink: receives every event, the `RunFinished` last.
            recorder: the session store's writer; after a `SessionError` the run goes on unrecorded
                with a `WarningEvent`.

        Raises:
            asyncio.CancelledError: when the caller's task is cancelled; the history is closed and
                stored first, and the sink has seen the closing events.
        """
        self._stop, self._finished = None, None
        recorder = self._store(recorder, history, sink)
        self._task = asyncio.ensure_future(self._consume(history, sink, recorder))

        def on_signal(signum: int) -> bool:
            return self._cancel(_by_signal(signum))

        with self.interrupts.stopping(on_signal) if self.interrupts is not None else nullcontext():
            try:
                await self._task
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if self._stop is None or (current is not None and current.cancelling()):
                    raise
            finally:
                self._task = None
                self._store(recorder, history, sink)  # whatever ended the run, what the loop closed is kept
        if self._finished is None:  # stopped before the loop began: nothing to close, still one RunFinished
            assert self._stop is not None  # otherwise react ended with its own RunFinished
            self._finished = self._stop
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
                    # an answer its sink could not write did not complete either (a sink may hold a turn's text
                    # until the turn ends: `crow run > file`)
                    if self._stop is not None and (event.status == "cancelled" or self._stop.output_errno is not None):
                        event = replace(self._stop, final_text=event.final_text, turns=event.turns)
                    self._finished = event
                if sink is not None:
                    try:
                        sink.handle(event)
                    except OSError as exc:  # the terminal or pipe is gone (a closed window, `| head`), a full disk
                        sink = None
                        self._cancel(output_lost(exc), OUTPUT_LOST_NOTE)

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
