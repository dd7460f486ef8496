"""Property: after any sequence of faults and cancellations the history satisfies the contract.

Several runs share one history (as a chat session does). Each model turn is scripted: text, tool
calls (ids repeated or `""`, tools that fail, time out or are unknown), a stream cut mid-way, or a
server error; the run may be cancelled after any event. After each run, as the loop left it (nothing
repaired by the caller), the history keeps the contract ../shared/conformance/run.py checks
(`replay_server.history_violations`) with no call left unanswered, and so does every request.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from crow_cli.history import Message, pending_tool_calls, repair_history, user_message
from crow_cli.loop import LoopSettings, react
from crow_cli.tools.registry import ToolRegistry
from tests.support import ScriptedStream, assert_contract, boom, ok, slow

call_ids = st.sampled_from(["call_a", "call_b", "", "call_a"])
tool_names = st.sampled_from(["ok", "boom", "slow", "missing"])
calls = st.lists(st.tuples(call_ids, tool_names), min_size=1, max_size=3)
steps = st.one_of(st.just(("text",)), st.just(("error",)), st.tuples(st.just("tools"), calls),
                  st.tuples(st.just("cut"), calls))
# Each script ends with a text answer, so the loop never asks beyond it (ScriptedStream fails if it does).
scripts = st.lists(steps, max_size=4).map(lambda script: [*script, ("text",)])
runs = st.lists(st.tuples(scripts, st.none() | st.integers(1, 25)), min_size=1, max_size=4)


def _repeated_ids(plan: list[tuple[list[tuple[Any, ...]], int | None]]) -> frozenset[str]:
    """Ids a scripted turn gives to several of its calls: the contract allows repeats the stream made."""
    return frozenset(cid for script, _ in plan for step in script if step[0] in ("tools", "cut")
                     for cid, _name in step[1] if [c for c, _n in step[1]].count(cid) > 1)


async def _play(plan: list[tuple[list[tuple[Any, ...]], int | None]]) -> list[Message]:
    registry = ToolRegistry()
    for t in (ok, boom, slow):
        registry.register(t)
    history: list[Message] = []
    loop_settings = LoopSettings(max_turns=3)  # `slow` times out by its own limit; the others never
    dup_ids = _repeated_ids(plan)
    for n, (script, cancel_after) in enumerate(plan):
        history.append(user_message(f"request {n}"))

        async def consume(script: list[tuple[Any, ...]] = script, cancel_after: int | None = cancel_after) -> None:
            seen = 0
            async for _event in react(history, ScriptedStream(script, dup_ids), registry, loop_settings):
                seen += 1
                if seen == cancel_after:  # a signal lands here; it is delivered at the loop's next await
                    task = asyncio.current_task()
                    assert task is not None
                    task.cancel()

        task = asyncio.create_task(consume())
        with contextlib.suppress(asyncio.CancelledError):  # cancelled mid-run, or just after its last event
            await task
        # the loop closed its own history: valid as it stands (issue 18: it was repaired before this check,
        # which hid a `_Closing.close()` that left a call unanswered)
        assert_contract(history, dup_ids)
        assert pending_tool_calls(history) == []
        assert repair_history(history, "cancelled") == []
    return history


@settings(max_examples=150, deadline=None)
@given(runs)
def test_history_contract_holds_after_faults_and_cancellations(plan: list[tuple[list[tuple[Any, ...]], int | None]]
                                                               ) -> None:
    history = asyncio.run(_play(plan))
    assert_contract(history, _repeated_ids(plan))
    assert [m["content"] for m in history if m["role"] == "user"] == [f"request {n}" for n in range(len(plan))]
