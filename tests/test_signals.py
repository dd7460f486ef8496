"""`crow_cli.signals.Interrupts`: what a signal stops, and when the surface ends (in process, real signals)."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from crow_cli.driver import chat_interrupts
from crow_cli.signals import Interrupts


async def test_an_end_signal_with_nothing_running_cancels_the_task_that_entered() -> None:
    with Interrupts(end=(signal.SIGTERM,)) as interrupts:
        with pytest.raises(asyncio.CancelledError):
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.Event().wait()  # delivered at the loop's next turn
        asyncio.current_task().uncancel()  # type: ignore[union-attr]
    assert (interrupts.signum, interrupts.name, interrupts.exit_code) == (signal.SIGTERM, "SIGTERM", 143)


async def test_chats_ctrl_c_stops_the_turn_and_the_chat_goes_on_then_ends_it_with_nothing_to_stop() -> None:
    stopped: list[int] = []
    seen = asyncio.Event()

    def stop(signum: int) -> bool:
        stopped.append(signum)
        seen.set()
        return True

    with chat_interrupts() as interrupts:
        with interrupts.stopping(stop):
            os.kill(os.getpid(), signal.SIGINT)
            await seen.wait()
        assert stopped == [signal.SIGINT] and interrupts.signum is None  # the turn stopped; the chat goes on
        with pytest.raises(asyncio.CancelledError):
            os.kill(os.getpid(), signal.SIGINT)  # at no turn (start-up, piped input): the chat ends
            await asyncio.Event().wait()
        asyncio.current_task().uncancel()  # type: ignore[union-attr]
    assert interrupts.exit_code == 130


async def test_a_stopper_with_nothing_left_to_stop_lets_the_end_signal_end_the_surface() -> None:
    with Interrupts(end=(signal.SIGHUP,)) as interrupts, interrupts.stopping(lambda _signum: False):
        with pytest.raises(asyncio.CancelledError):
            os.kill(os.getpid(), signal.SIGHUP)
            await asyncio.Event().wait()
        asyncio.current_task().uncancel()  # type: ignore[union-attr]
    assert interrupts.exit_code == 129
