"""The driver: one way to run the loop for every surface: cancellation, persistence, exit status."""

from __future__ import annotations

import asyncio
import errno
import os
import signal
from pathlib import Path

import pytest

from crow_cli.config import Settings
from crow_cli.driver import Driver, output_lost, run_interrupts
from crow_cli.errors import SessionError
from crow_cli.events import Event, RunFinished, TextDelta, WarningEvent
from crow_cli.history import Message, user_message
from crow_cli.loop import LoopSettings
from crow_cli.sessions import SessionStore
from crow_cli.surfaces.persist import SessionRecorder
from crow_cli.wire.protocol import ChatStream
from tests.support import chunk


class Stalling(ChatStream):
    """A `ChatStream` that streams some text, then waits until cancelled."""

    async def stream(self, messages, tools=None):
        yield chunk({"content": "Half"})
        await asyncio.Event().wait()


class Answering(ChatStream):
    async def stream(self, messages, tools=None):
        yield chunk({"content": "Hi"}, "stop")


class Events:
    def __init__(self, on_text=None) -> None:
        self.seen: list[Event] = []
        self.on_text = on_text

    def handle(self, event: Event) -> None:
        self.seen.append(event)
        if isinstance(event, TextDelta) and self.on_text:
            self.on_text()


def driver(client) -> Driver:
    return Driver(client, None, LoopSettings(), None)


async def test_cancel_ends_the_run_with_the_reason_and_exit_code_given():
    d = driver(Stalling())
    sink = Events(on_text=lambda: d.cancel("interrupted (SIGTERM)", 143))
    history = [user_message("go")]
    finished = await d.run(history, sink)
    assert finished == RunFinished("cancelled", "Half", 1, "interrupted (SIGTERM)", 143)
    assert sink.seen[-1] == finished and not d.running
    assert history[-1]["content"] == "Half\n\n[interrupted by the user]" and d.cancel() is False  # nothing left


async def test_a_signal_cancels_the_run_and_sets_the_exit_code():
    with run_interrupts() as interrupts:
        d = Driver(Stalling(), None, LoopSettings(), None, interrupts=interrupts)
        sink = Events(on_text=lambda: os.kill(os.getpid(), signal.SIGHUP))
        finished = await d.run([user_message("go")], sink)
    assert (finished.status, finished.error, finished.exit_code) == ("cancelled", "interrupted (SIGHUP)", 129)
    assert (finished.signal, finished.output_errno, interrupts.signum) == (signal.SIGHUP, None, signal.SIGHUP)


async def test_a_signal_before_the_run_ends_the_scope_and_the_code_after_it_reads_how():
    # the run scope owns signal -> cancel -> uncancel -> exit code, start-up included (surfaces call none of it)
    with run_interrupts() as scope:
        os.kill(os.getpid(), signal.SIGTERM)  # no driver runs yet (MCP servers starting): the task is cancelled
        await asyncio.Event().wait()
    after = asyncio.current_task().cancelling()  # type: ignore[union-attr]
    assert scope.finished == RunFinished("cancelled", "", 0, "interrupted (SIGTERM)", 143, signal=signal.SIGTERM)
    assert after == 0 and scope.exit_code == 143


async def test_a_cancellation_that_no_signal_made_passes_through_the_scope():
    async def inside() -> None:
        with run_interrupts() as scope:
            await asyncio.Event().wait()
        raise AssertionError(f"the scope swallowed the caller's cancellation ({scope.finished})")

    task = asyncio.ensure_future(inside())
    await asyncio.sleep(0)  # the task enters its scope
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


class Unwritable:
    """A sink whose output fails with `errno` at the first text."""

    def __init__(self, code: int) -> None:
        self.code = code

    def handle(self, event: Event) -> None:
        if isinstance(event, TextDelta):
            raise OSError(self.code, os.strerror(self.code))


@pytest.mark.parametrize(("code", "exit_code", "gone"), [(errno.EPIPE, 141, True), (errno.EIO, 129, True),
                                                         (errno.ENOSPC, 1, False)])
async def test_output_that_cannot_be_written_ends_the_run_with_its_errno(code: int, exit_code: int,
                                                                         gone: bool) -> None:
    # The cause is typed (surfaces read output_errno / output_gone, never the error text)
    history = [user_message("go")]
    finished = await driver(Stalling()).run(history, Unwritable(code))
    assert (finished.status, finished.exit_code, finished.output_errno, finished.output_gone) == (
        "cancelled", exit_code, code, gone)
    assert finished == output_lost(OSError(code, os.strerror(code)), "Half", 1)
    # CI (stop 26): the stored partial answer said "[interrupted by the user]" when nobody had stopped it
    assert history[-1] == {"role": "assistant", "content": "Half\n\n[interrupted: the output could not be written]"}


async def test_every_message_is_stored_as_it_is_appended_and_the_closed_history_too(tmp_path: Path):
    with SessionStore(tmp_path / "s.db") as store:
        recorder = SessionRecorder(store, Settings(model="m", base_url="http://h/v1"))
        d = driver(Stalling())
        history: list[Message] = [user_message("go")]
        await d.run(history, Events(on_text=d.cancel), recorder)
        assert store.messages(recorder.session_id) == history and len(history) == 2


async def test_the_callers_cancellation_closes_and_stores_the_history_then_propagates(tmp_path: Path):
    with SessionStore(tmp_path / "s.db") as store:
        recorder = SessionRecorder(store, Settings(model="m", base_url="http://h/v1"))
        history: list[Message] = [user_message("go")]
        sink = Events()
        task = asyncio.ensure_future(driver(Stalling()).run(history, sink, recorder))
        sink.on_text = task.cancel
        with pytest.raises(asyncio.CancelledError):
            await task
        assert store.messages(recorder.session_id) == history and history[-1]["role"] == "assistant"
        assert sink.seen[-1].status == "cancelled"


class BrokenRecorder:
    def __init__(self) -> None:
        self.calls = 0

    def sync(self, history: list[Message]) -> None:
        self.calls += 1
        raise SessionError("disk full")


async def test_a_store_that_fails_is_said_once_and_the_run_goes_on():
    recorder = BrokenRecorder()
    sink = Events()
    finished = await driver(Answering()).run([user_message("go")], sink, recorder)
    warnings = [e for e in sink.seen if isinstance(e, WarningEvent)]
    assert finished.status == "completed" and recorder.calls == 1
    assert [w.message for w in warnings] == ["disk full; the rest of this session is not recorded"]


async def test_a_cancel_before_the_loop_starts_still_ends_with_one_run_finished():
    # a cancel right after the prompt starts (ACP session/cancel after session/prompt) ends it cleanly
    d = driver(Answering())
    sink = Events()
    task = asyncio.ensure_future(d.run([user_message("go")], sink))
    await asyncio.sleep(0)  # run() has started its loop task, which has not taken a step yet
    assert d.cancel("cancelled", 0)
    finished = await task
    assert finished == RunFinished("cancelled", "", 0, "cancelled", 0) and sink.seen == [finished]


# each output errno has its own cause and exit code (a full disk, ENOSPC, is not a closed pipe)
@pytest.mark.parametrize(("errno_", "error", "code"), [
    (errno.EPIPE, "the output was closed", 141), (errno.EIO, "the terminal was closed", 129),
    (errno.ENOSPC, f"cannot write the output: {os.strerror(errno.ENOSPC)}", 1),
])
async def test_an_output_that_fails_ends_the_run_with_what_failed(errno_: int, error: str, code: int):
    finished = await driver(Stalling()).run([user_message("go")], Unwritable(errno_))
    assert finished.status == "cancelled" and (finished.error, finished.exit_code) == (error, code)
