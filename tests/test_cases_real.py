"""Real servers' streams, recorded with `crow run --record` (tests/cases_real/*.json), replayed.

Each case is in the conformance case format (`responses`, `expected`) plus `recorded_requests`: the
request bodies crow sent to the real server. Replaying the responses through the real client and
loop (respx at the transport) must assemble `expected` and send back the same history the real
run sent, with the model's own ids.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

from crow_cli.events import RunFinished
from crow_cli.loop import react
from crow_cli.tools.approval import make_approver
from crow_cli.tools.registry import ToolRegistry
from crow_cli.wire.accumulate import StreamAccumulator
from crow_cli.wire.client import ChatClient, ClientSettings
from tests.replay_server import history_violations
from tests.support import ROOT, sse_chunks

CASES = sorted((Path(__file__).parent / "cases_real").glob("*.json"))
BASE = "http://real.test/v1"


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _registry() -> ToolRegistry:
    registry = ToolRegistry()
    registry.load_builtins()
    registry.load_folder(ROOT / "tools")
    return registry


def _assert_calls(sent: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    assert [(c["id"], c["function"]["name"]) for c in sent] == \
        [(c["id"], c["function"]["name"]) for c in expected]
    assert [json.loads(c["function"]["arguments"]) for c in sent] == \
        [json.loads(c["function"]["arguments"]) for c in expected]


def test_there_is_a_llama_cpp_recording() -> None:
    assert any(p.name.startswith("llama-cpp-") for p in CASES)


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_accumulator_assembles_the_recorded_stream(path: Path) -> None:
    case = _load(path)
    acc = StreamAccumulator()
    for chunk in sse_chunks(case["responses"][0]["sse"]):
        acc.feed(chunk)
    turn, _ = acc.finish()
    expected = case["expected"]
    assert turn.finish_reason == expected["finish_reason"]
    assert (turn.content or None) == expected["content"]
    _assert_calls([c.to_wire() for c in turn.tool_calls], expected["tool_calls"])


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
async def test_replay_through_client_and_loop(path: Path) -> None:
    case = _load(path)
    recorded = case["recorded_requests"]
    first_user = recorded[0]["messages"]
    with respx.mock(assert_all_called=True) as router:
        route = router.post(f"{BASE}/chat/completions").mock(side_effect=[
            httpx.Response(200, headers={"content-type": "text/event-stream"}, text=r["sse"])
            for r in case["responses"]
        ])
        client = ChatClient(ClientSettings(base_url=BASE, model=recorded[0]["model"], max_retries=0))
        history = [dict(m) for m in first_user]
        approve = make_approver("yolo")
        try:
            events = [e async for e in react(history, client, _registry(), approve=approve)]
        finally:
            await client.aclose()
    assert isinstance(events[-1], RunFinished) and events[-1].status == "completed", events[-1]
    assert route.call_count == len(case["responses"])
    # Every request keeps the history contract ../shared/conformance/run.py checks
    assert [(n, v) for n, call in enumerate(route.calls, 1)
            for v in history_violations(json.loads(call.request.content))] == []

    second = json.loads(route.calls[1].request.content)
    real = recorded[1]
    n = len(first_user)
    assert second["messages"][:n] == real["messages"][:n]
    assistant, tool = second["messages"][n], second["messages"][n + 1]
    assert assistant["role"] == "assistant" == real["messages"][n]["role"]
    _assert_calls(assistant["tool_calls"], real["messages"][n]["tool_calls"])
    _assert_calls(assistant["tool_calls"], case["expected"]["tool_calls"])
    assert tool["role"] == "tool" and tool["tool_call_id"] == case["expected"]["tool_calls"][0]["id"]
    assert tool["tool_call_id"] == real["messages"][n + 1]["tool_call_id"]
    assert {k: v for k, v in second.items() if k not in ("messages", "tools")} == \
        {k: v for k, v in real.items() if k not in ("messages", "tools")}
