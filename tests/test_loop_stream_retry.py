"""The loop asks once more for a turn whose stream was cut, from the same history, and says so."""

from __future__ import annotations

from typing import Any

from crow_cli.events import Notice, RunFinished, ToolCallStarted, ToolRunStarted
from crow_cli.history import user_message
from crow_cli.loop import LoopSettings, react
from crow_cli.tools.registry import ToolRegistry
from tests.support import ScriptedStream, ok


class RecordingStream(ScriptedStream):
    def __init__(self, steps: list[tuple[Any, ...]]) -> None:
        super().__init__(steps)
        self.sent: list[list[dict[str, Any]]] = []

    def stream(self, messages, tools=None):  # type: ignore[no-untyped-def]
        self.sent.append([dict(m) for m in messages])
        return super().stream(messages, tools)


async def _run(steps: list[tuple[Any, ...]], attempts: int = 2) -> tuple[list, list, RecordingStream]:
    registry = ToolRegistry()
    registry.register(ok)
    history = [user_message("go")]
    stream = RecordingStream(steps)
    events = [e async for e in react(history, stream, registry, LoopSettings(stream_attempts=attempts))]
    return history, events, stream


async def test_a_cut_tool_turn_is_asked_again_and_its_calls_run_once() -> None:
    history, events, stream = await _run([("cut", [("call_x", "ok")]), ("tools", [("call_y", "ok")]), ("text",)])
    stream.assert_used_up()
    kinds = [type(e) for e in events]
    notice = kinds.index(Notice)
    assert events[notice].code == "turn_restarted"
    assert [e.call_id for e in events[:notice] if isinstance(e, ToolCallStarted)] == ["call_x"]
    assert [e.call.id for e in events if isinstance(e, ToolRunStarted)] == ["call_y"]  # the cut call never ran
    assert stream.sent[0] == stream.sent[1]
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant"]
    assert history[1]["tool_calls"][0]["id"] == "call_y" and history[2]["tool_call_id"] == "call_y"
    assert events[-1] == RunFinished("completed", "done", 2)


async def test_a_second_cut_fails_the_run_and_leaves_the_history_untouched() -> None:
    history, events, stream = await _run([("cut", [("a", "ok")]), ("cut", [("b", "ok")])])
    stream.assert_used_up()
    assert events[-1].status == "error" and "after 2 attempts" in events[-1].error
    assert history == [user_message("go")]


async def test_stream_attempts_one_means_no_retry() -> None:
    _, events, stream = await _run([("cut", [("a", "ok")]), ("text",)], attempts=1)
    assert events[-1].status == "error" and len(stream.sent) == 1 and stream.steps == [("text",)]
    assert not any(isinstance(e, Notice) for e in events)
