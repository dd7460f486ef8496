"""The event-loop watchdog: an async tool that blocks the loop is named while it blocks."""

from __future__ import annotations

import asyncio
import threading

from crow_cli.tools.tool import Tool
from crow_cli.tools.watchdog import LoopWatchdog


# an async plugin tool calling time.sleep inside async def (which defeats the tool timeout and Ctrl-C) is named
async def test_an_async_tool_that_blocks_the_loop_is_named_while_it_blocks() -> None:
    said: list[str] = []
    heard = threading.Event()

    def report(message: str) -> None:
        said.append(message)
        heard.set()

    dog = LoopWatchdog(report, blocked_after_s=0.2)

    async def hog() -> str:
        heard.wait(60)  # blocking code inside async def: returns once the watchdog has spoken (60 s: a hang)
        return "done"

    assert await dog.track("hog", hog()) == "done"
    assert len(said) == 1 and "tool 'hog' has blocked crow" in said[0] and "asyncio.to_thread" in said[0]


async def test_a_well_behaved_async_tool_is_not_reported_and_cancellation_reaches_it() -> None:
    said: list[str] = []
    dog = LoopWatchdog(said.append, blocked_after_s=0.2)
    cancelled = asyncio.Event()

    async def polite() -> str:
        for _ in range(3):
            await asyncio.sleep(0)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    task = asyncio.ensure_future(dog.track("polite", polite()))
    for _ in range(10):
        await asyncio.sleep(0)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled() and cancelled.is_set() and said == []


async def test_every_async_tool_runs_under_the_watchdog() -> None:
    from crow_cli.tools import watchdog

    seen: list[str | None] = []

    async def probe() -> str:
        seen.append(watchdog.watchdog.executing())
        return "ok"

    assert await Tool("probe", "Probe.", probe, parameters={"type": "object"}).invoke({}) == "ok"
    assert seen == ["probe"]
