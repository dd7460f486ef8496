"""Smoke: a real llama.cpp server (tiny SmolLM2), a real `crow run --record`, a real streamed tool call.

Uses the server at CROW_LLAMA_BASE_URL when set; otherwise starts `scripts/llama-server.sh` when its
engine (the xllamacpp wheel) and cached model are present (`scripts/llama-server.sh prepare` fetches the
model; `.ci/run` does).
Skipped, with the reason, when neither is available. Everything asserted comes from the recording:
llama.cpp tool-call ids are random and the whitespace in its arguments varies, so the test compares
the id it streamed with the id sent back, and parsed JSON arguments.
"""

from __future__ import annotations

import importlib.util
import json
import os
import selectors
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import ROOT

pytestmark = [pytest.mark.smoke]

SCRIPT = ROOT / "scripts" / "llama-server.sh"
CROW = Path(sys.executable).parent / "crow"
# Read at import: the autouse fixture later swaps HOME and drops CROW_* variables for each test.
BASE_URL = os.environ.get("CROW_LLAMA_BASE_URL", "")
CACHE = os.environ.get("CROW_LLAMA_CACHE") or str(Path.home() / ".cache" / "crow")
REQUIRED = os.environ.get("CROW_SMOKE_REQUIRED") == "1"  # .ci/run: a missing server is a failure there
PROMPT = "Please use roll_dice to roll one 20-sided die."


def _script(*args: str, **kwargs: Any) -> subprocess.Popen[str]:
    env = {**os.environ, "CROW_LLAMA_CACHE": CACHE, "CROW_LLAMA_THREADS": "1"}  # beside busy workers: no spinning
    return subprocess.Popen([str(SCRIPT), *args], env=env, text=True, **kwargs)


@pytest.fixture(scope="module")
def llama_url(one_llama_for_the_module: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of a running llama-server (started here and stopped after the module, when needed)."""
    if BASE_URL:
        yield BASE_URL
        return
    if _script("check").wait() != 0:
        reason = (f"no llama.cpp server: CROW_LLAMA_BASE_URL is not set and no xllamacpp engine or cached model "
                  f"under {CACHE} (run scripts/llama-server.sh prepare, as .ci/run does)")
        (pytest.fail if REQUIRED else pytest.skip)(reason)
    log = tmp_path_factory.mktemp("llama") / "llama-server.sh.log"
    with log.open("w") as err:
        proc = _script(stdout=subprocess.PIPE, stderr=err, start_new_session=True)
    try:
        assert proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        url = proc.stdout.readline().strip() if sel.select(timeout=300) else ""
        if not url.startswith("http://127.0.0.1:"):
            pytest.fail(f"scripts/llama-server.sh printed no base URL:\n{log.read_text()[-3000:]}")
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def _assemble(sse_text: str) -> tuple[list[dict[str, Any]], str | None]:
    """Tool calls (wire shape) and finish_reason of one recorded stream, assembled by the case converter."""
    spec = importlib.util.spec_from_file_location("recording_to_case", ROOT / "scripts" / "recording_to_case.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    expected = module.expected_from(sse_text)
    return expected["tool_calls"], expected["finish_reason"]


def _answered(rec: Path) -> list[str]:
    """The numbers of the recorded exchanges the server answered, in order. A request on a kept-alive connection
    the server had just closed fails and is sent again (the SDK's retry): it is recorded without a response."""
    return sorted(meta.name[:4] for meta in rec.glob("*-meta.json") if "error" not in json.loads(meta.read_text()))


def test_streamed_tool_call_round_trip(llama_url: str, tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    proc = subprocess.run(
        [str(CROW), "run", "--base-url", llama_url, "--model", "smollm2", "--yes", "--max-turns", "4",
         "--tools-dir", str(ROOT / "tools"), "--record", str(rec), PROMPT],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, f"crow exited {proc.returncode}:\n{proc.stderr}"
    assert "Traceback" not in proc.stderr

    # The turns are the answered exchanges: a recording may hold a request left unanswered ("Server disconnected
    # without sending a response": llama.cpp closed the idle connection) before its answered retry
    turn1, turn2 = _answered(rec)[:2]
    # Turn 1, as llama.cpp streamed it: a tool call assembled from deltas.
    first = (rec / f"{turn1}-response.sse").read_text()
    calls, finish = _assemble(first)
    assert finish == "tool_calls", first[-2000:]
    assert len(calls) >= 1 and calls[0]["function"]["name"] == "roll_dice", calls
    call = calls[0]
    assert call["id"], "llama.cpp sends an id for every call"
    args = json.loads(call["function"]["arguments"])
    assert isinstance(args, dict)

    # Turn 2's request carried the call back with the same id, and its executed result.
    second = json.loads((rec / f"{turn2}-request.json").read_text())
    assistant, result = second["messages"][-1 - len(calls)], second["messages"][-len(calls)]
    assert assistant["role"] == "assistant"
    sent = assistant["tool_calls"][0]
    assert sent["id"] == call["id"] and sent["function"]["name"] == "roll_dice"
    assert json.loads(sent["function"]["arguments"]) == args
    assert result["role"] == "tool" and result["tool_call_id"] == call["id"]
    assert result["content"].startswith("rolls: ["), result["content"]  # roll_dice really ran
    assert "→ roll_dice(" in proc.stderr

    # The server answered turn 2 (any text; tiny models may stop at the token cap).
    _, second_finish = _assemble((rec / f"{turn2}-response.sse").read_text())
    assert second_finish in ("stop", "length", "tool_calls")


def test_acp_prompt_makes_a_real_tool_call(llama_url: str, tmp_path: Path) -> None:
    """One ACP prompt (`crow acp` through the SDK's client side) produces a real tool call."""
    import asyncio

    from acp import PROTOCOL_VERSION, spawn_agent_process, text_block
    from acp.schema import ToolCallProgress, ToolCallStart

    updates: list[Any] = []

    class Editor:
        async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
            updates.append(update)

    async def prompt() -> str:
        args = ["acp", "--base-url", llama_url, "--model", "smollm2", "--yes", "--max-turns", "4",
                "--tools-dir", str(ROOT / "tools")]
        async with spawn_agent_process(Editor(), str(CROW), *args, cwd=tmp_path, env=dict(os.environ)) as (conn, _):
            await conn.initialize(protocol_version=PROTOCOL_VERSION)
            session = await conn.new_session(cwd=str(tmp_path), mcp_servers=[])
            response = await conn.prompt(session_id=session.session_id, prompt=[text_block(PROMPT)])
            return str(response.stop_reason)

    stop = asyncio.run(prompt())
    assert stop in ("end_turn", "max_turn_requests")
    starts = [u for u in updates if isinstance(u, ToolCallStart)]
    assert starts and starts[0].title.startswith("roll_dice") and starts[0].tool_call_id == "1-0"
    done = [u for u in updates if isinstance(u, ToolCallProgress) and u.tool_call_id == "1-0" and u.content]
    assert done and done[-1].status == "completed" and done[-1].content[0].content.text.startswith("rolls: [")


def test_probe_tools_reports_each_point_against_llama_cpp(llama_url: str) -> None:
    """`crow probe --tools` completes against a real llama.cpp server and reports each point with one of its four
    outcomes (the tiny model may well make no call: the report is checked, not the model's skill)."""
    import re

    proc = subprocess.run([str(CROW), "probe", "--tools", "--base-url", llama_url, "--model", "smollm2",
                           "--budget", "300"], capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert proc.returncode in (0, 1), f"crow exited {proc.returncode}:\n{proc.stderr}"
    assert "Traceback" not in proc.stderr
    said = dict(re.findall(r"^. (one call|typed argument|two calls): (native call|recovered call|no call|malformed)\b",
                           proc.stdout, re.MULTILINE))
    assert list(said) == ["one call", "typed argument", "two calls"], proc.stdout
    assert proc.returncode == (0 if {"native call", "recovered call"} & set(said.values()) else 1), proc.stdout
