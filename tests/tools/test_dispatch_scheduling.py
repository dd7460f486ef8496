"""Dispatch scheduling: exclusive tools run alone; parallel-safe ones overlap and are not held up by prompts."""

from __future__ import annotations

import asyncio
import json

from crow_cli.events import ToolResultReady
from crow_cli.history import ToolCall
from crow_cli.tools.approval import Answer, ApprovalPolicy, Approvals, Question
from crow_cli.tools.dispatch import dispatch
from crow_cli.tools.registry import ToolRegistry
from crow_cli.tools.tool import Tool, tool


def _calls(*names: str) -> list[ToolCall]:
    return [ToolCall(f"call_{i}", n, json.dumps({"label": f"{n}{i}"}), i) for i, n in enumerate(names)]


async def _results(calls: list[ToolCall], registry: ToolRegistry, approve=None) -> dict[int, str]:
    out = {}
    async with asyncio.timeout(60):  # a scheduling bug shows as a deadlock: fail instead of hanging
        async for event in dispatch(calls, registry, approve=approve):
            if isinstance(event, ToolResultReady):
                out[event.result.index] = event.result.output
    return out


async def test_exclusive_calls_overlap_nothing() -> None:
    active: list[str] = []
    overlaps: list[tuple[str, list[str]]] = []

    def make(name: str, parallel: bool) -> Tool:
        async def body(label: str) -> str:
            active.append(label)
            for _ in range(5):  # give every other task a chance to start while this one runs
                if not parallel and len(active) > 1:
                    overlaps.append((label, list(active)))
                await asyncio.sleep(0.001)
            active.remove(label)
            return label
        return tool(body, name=name, parallel=parallel)

    registry = ToolRegistry()
    registry.register(make("reader", True))
    registry.register(make("writer", False))
    calls = _calls("reader", "writer", "reader", "writer", "writer", "reader", "reader")
    results = await _results(calls, registry)
    assert results == {c.index: json.loads(c.arguments)["label"] for c in calls}
    assert overlaps == []


async def test_parallel_calls_run_together() -> None:
    started = 0
    all_started = asyncio.Event()

    @tool
    async def reader(label: str) -> str:
        """Waits until all three readers are running at once."""
        nonlocal started
        started += 1
        if started == 3:
            all_started.set()
        await all_started.wait()
        return label

    registry = ToolRegistry()
    registry.register(reader)
    assert await _results(_calls("reader", "reader", "reader"), registry) == {0: "reader0", 1: "reader1",
                                                                             2: "reader2"}


async def test_parallel_calls_keep_running_while_a_prompt_waits() -> None:
    reader_done = asyncio.Event()
    asked: list[str] = []

    @tool
    async def reader(label: str) -> str:
        """Read-only."""
        reader_done.set()
        return label

    @tool(needs_approval=True, parallel=False)
    async def writer(label: str) -> str:
        """Needs approval."""
        return label

    async def ask(question: Question) -> Answer:
        asked.append(question.call.name)
        await reader_done.wait()  # the prompt is answered only after the reader has finished
        return Answer("yes")

    approve = Approvals(ApprovalPolicy("ask"), ask)

    registry = ToolRegistry()
    registry.register(reader)
    registry.register(writer)
    assert await _results(_calls("writer", "reader"), registry, approve) == {0: "writer0", 1: "reader1"}
    assert asked == ["writer"]


async def test_a_writer_waiting_for_approval_does_not_block_other_writers() -> None:
    second_done = asyncio.Event()

    @tool(needs_approval=True, parallel=False)
    async def writer(label: str) -> str:
        """Needs approval."""
        if label == "writer1":
            second_done.set()
        return label

    async def before(call: ToolCall, t: Tool) -> None:  # what a surface fetches before the decision
        if call.index == 0:
            await second_done.wait()

    approve = Approvals(ApprovalPolicy("yolo"), before=before)

    registry = ToolRegistry()
    registry.register(writer)
    assert await _results(_calls("writer", "writer"), registry, approve) == {0: "writer0", 1: "writer1"}
