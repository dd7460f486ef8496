"""`crow mcp` (crow_cli/surfaces/mcp_server.py) driven by the `mcp` package's own client: `ClientSession` over
`stdio_client`, spawning the real `crow mcp` process, against the replay server as the model.

One process serves several independent calls of a test (the replay script is used in order)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from crow_cli.sessions import SessionStore
from tests.replay_server import ReplayServer
from tests.support import CANCELLED, CROW, text_sse, tool_calls_sse, tool_messages


@contextlib.asynccontextmanager
async def crow_mcp(server: ReplayServer, workspace: Path, *extra: str,
                   elicit: Any = None) -> AsyncIterator[ClientSession]:
    """A `crow mcp` process on `server`, its workspace `workspace`, as an initialized client session."""
    params = StdioServerParameters(
        command=CROW, args=["mcp", "--base-url", server.base_url, "--api-key", "sk-test", "--model", "test-model",
                            "--workspace", str(workspace), *extra],
        env=dict(os.environ), cwd=str(workspace))
    with open(workspace / "crow-mcp.log", "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), \
                ClientSession(read, write, elicitation_callback=elicit) as s:
            await s.initialize()
            yield s


def text_of(result: types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def test_tools_runs_replies_bad_arguments_and_refused_approval(tmp_path: Path) -> None:
    project = tmp_path / "project"  # the first call's cwd, not the server's workspace: the reply runs there too
    project.mkdir()
    (project / "notes.txt").write_text("the notes\n")
    steps = [
        {"sse": tool_calls_sse(("call_r1", "read_file", {"path": "notes.txt"}),
                               usage={"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13})},
        {"sse": text_sse("The notes say: the notes.")},
        {"sse": tool_calls_sse(("call_r2", "read_file", {"path": "notes.txt"}))},  # the reply
        {"sse": text_sse("You asked about notes.txt.")},
        {"sse": tool_calls_sse(("call_w1", "write_file", {"path": "new.txt", "content": "x"}))},
        {"sse": text_sse("I could not write it.")},
    ]
    progress: list[str] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    with ReplayServer(steps) as server:
        async with crow_mcp(server, tmp_path) as client:
            listed = await client.list_tools()
            assert [t.name for t in listed.tools] == ["crow_run", "crow_reply"]
            assert listed.tools[0].input_schema["required"] == ["prompt"]

            # bad arguments: one JSON-RPC error each, and the server goes on serving
            with pytest.raises(MCPError) as bad:
                await client.call_tool("crow_run", {"promt": "typo"})
            assert bad.value.code == types.INVALID_PARAMS and "prompt" in bad.value.message
            with pytest.raises(MCPError) as looser:
                await client.call_tool("crow_run", {"prompt": "hi", "approval": "yolo"})
            assert "looser than the server's 'ask'" in looser.value.message
            with pytest.raises(MCPError) as unknown:
                await client.call_tool("crow_nothing", {})
            assert unknown.value.code == types.INVALID_PARAMS
            assert server.requests == []  # none of them reached the model

            first = await client.call_tool("crow_run", {"prompt": "Read notes.txt", "cwd": str(project)},
                                           progress_callback=on_progress)
            assert not first.is_error
            assert text_of(first) == "The notes say: the notes."
            meta = first.structured_content
            assert meta is not None and meta["status"] == "completed" and meta["turns"] == 2
            assert meta["usage"] == {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}
            assert progress[0].startswith("→ read_file(") and progress[1].startswith("✓ read_file ok")
            assert tool_messages(server.requests[1])[0]["tool_call_id"] == "call_r1"

            session_id = meta["session_id"]
            reply = await client.call_tool("crow_reply", {"session_id": session_id, "prompt": "What did I ask?"})
            assert text_of(reply) == "You asked about notes.txt."
            assert reply.structured_content is not None and reply.structured_content["session_id"] == session_id
            sent = server.requests[2]["messages"]
            assert {"role": "assistant", "content": "The notes say: the notes."}.items() <= sent[-2].items()
            assert sent[-1] == {"role": "user", "content": "What did I ask?"}
            assert "the notes" in tool_messages(server.requests[3])[-1]["content"]  # read in the session's folder

            with pytest.raises(MCPError) as no_session:
                await client.call_tool("crow_reply", {"session_id": "nosuchsession", "prompt": "hi"})
            assert no_session.value.code == types.INVALID_PARAMS

            # this client cannot be asked (no elicitation): the call that needs approval is refused
            refused = await client.call_tool("crow_run", {"prompt": "Write new.txt", "model": "other-model"})
            assert text_of(refused) == "I could not write it."
            assert server.requests[4]["model"] == "other-model"
            assert "nobody can approve it here" in tool_messages(server.requests[5])[0]["content"]
            assert not (tmp_path / "new.txt").exists()
    assert server.history_errors == []


async def test_approval_asked_through_elicitation(tmp_path: Path) -> None:
    steps = [
        {"sse": tool_calls_sse(("call_w1", "write_file", {"path": "no.txt", "content": "x"}))},
        {"sse": text_sse("Declined.")},
        {"sse": tool_calls_sse(("call_w2", "write_file", {"path": "yes.txt", "content": "y"}))},
        {"sse": text_sse("Written.")},
    ]
    asked: list[str] = []
    answers = iter([types.ElicitResult(action="decline"),
                    types.ElicitResult(action="accept", content={"answer": "yes"})])

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return next(answers)

    with ReplayServer(steps) as server:
        async with crow_mcp(server, tmp_path, elicit=elicit) as client:
            declined = await client.call_tool("crow_run", {"prompt": "Write no.txt"})
            assert text_of(declined) == "Declined."
            assert "declined write_file" in tool_messages(server.requests[1])[0]["content"]
            written = await client.call_tool("crow_run", {"prompt": "Write yes.txt"})
            assert text_of(written) == "Written."
    assert len(asked) == 2 and "write_file" in asked[0] and "no.txt" in asked[0]
    assert not (tmp_path / "no.txt").exists() and (tmp_path / "yes.txt").read_text() == "y"


async def test_cancelled_call_stores_a_closed_history_while_another_runs(tmp_path: Path, approval_tools: Path) -> None:
    # two calls at once: the first waits on a long tool (an async nap: cancelled at once), the second answers;
    # the first is then cancelled
    steps = [
        {"sse": tool_calls_sse(("call_s1", "nap", {"seconds": 600}))},
        {"sse": text_sse("The other one.")},
    ]
    started = asyncio.Event()

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        if (message or "").startswith("→ nap"):
            started.set()

    with ReplayServer(steps) as server:
        async with crow_mcp(server, tmp_path, "--approval", "yolo", "--tools-dir", str(approval_tools),
                            "--debug") as client:
            long = asyncio.ensure_future(client.call_tool("crow_run", {"prompt": "Sleep"},
                                                          progress_callback=on_progress))
            await started.wait()
            other = await client.call_tool("crow_run", {"prompt": "Something else"})
            assert text_of(other) == "The other one."
            long.cancel()
            with pytest.raises(asyncio.CancelledError):
                await long
            # the server keeps serving once the cancelled run has stopped
            assert [t.name for t in (await client.list_tools()).tools] == ["crow_run", "crow_reply"]

            def stored() -> list[dict[str, Any]] | None:
                with SessionStore() as store:
                    for info in store.recent():
                        history = store.messages(info.id)
                        if history and history[0].get("content") == "Sleep":
                            return history
                return None

            # the cancellation reaches the server after the client stopped waiting: wait for the stored result
            deadline = asyncio.get_running_loop().time() + 60  # as support.wait_for
            while not ((history := stored()) and history[-1]["role"] == "tool"):
                log = [line for line in (tmp_path / "crow-mcp.log").read_text().splitlines() if "[delta]" not in line
                       and "Request options" not in line]
                assert asyncio.get_running_loop().time() < deadline, (history, log[-40:])
                await asyncio.sleep(0.05)
    assert [m["role"] for m in history] == ["user", "assistant", "tool"]
    assert history[-1]["tool_call_id"] == "call_s1" and history[-1]["content"] == CANCELLED


def test_sigterm_stops_the_running_call_stores_it_and_exits_143_stdout_protocol_only(tmp_path: Path) -> None:
    # a process test: the driver's editor_interrupts policy, and stdout carrying JSON-RPC lines only
    steps = [{"sse": tool_calls_sse(("call_s1", "run_shell", {"command": "sleep 600"}))}]
    with ReplayServer(steps) as server:
        proc = subprocess.Popen([CROW, "mcp", "--base-url", server.base_url, "--api-key", "sk-test", "--model",
                                 "test-model", "--workspace", str(tmp_path), "--approval", "yolo"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
        assert proc.stdin is not None and proc.stdout is not None

        def send(message: dict[str, Any]) -> None:
            assert proc.stdin is not None
            proc.stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
            proc.stdin.flush()

        try:
            send({"id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
            lines = [json.loads(proc.stdout.readline())]
            send({"method": "notifications/initialized"})
            proc.stdin.write(b"not json\n")  # answered, and the server goes on
            send({"id": 2, "method": "tools/call", "params": {"name": "crow_run", "arguments": {"prompt": "Sleep"},
                                                              "_meta": {"progressToken": "p1"}}})
            while not str(lines[-1].get("params", {}).get("message", "")).startswith("→ run_shell"):
                lines.append(json.loads(proc.stdout.readline()))  # every stdout line is a JSON-RPC message
            proc.send_signal(signal.SIGTERM)
            rest, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 143, err
    lines += [json.loads(line) for line in rest.splitlines()]
    assert all(m["jsonrpc"] == "2.0" for m in lines)
    assert lines[1]["error"]["code"] == -32700
    assert lines[2]["params"]["progressToken"] == "p1"
    with SessionStore() as store:
        (info,) = [i for i in store.recent() if i.messages]
        history = store.messages(info.id)
    assert [m["role"] for m in history] == ["user", "assistant", "tool"]
    assert history[-1]["content"] == CANCELLED


def test_a_client_gone_from_stdout_is_one_exit_not_a_traceback(tmp_path: Path) -> None:
    # a client gone from stdout (`crow mcp | head -c 10`) ends crow mcp with exit 1, no internal error
    proc = subprocess.Popen([CROW, "mcp", "--base-url", "http://127.0.0.1:9/v1", "--api-key", "sk-test", "--model",
                             "m", "--workspace", str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=tmp_path)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    proc.stdin.write(json.dumps(hello).encode() + b"\n")
    proc.stdin.flush()  # stdin stays open: only the failed write can end the server
    try:
        err = proc.stderr.read().decode()
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdin.close()
    assert proc.returncode == 1 and "internal error" not in err and "Traceback" not in err, err


INSPECTOR = "@modelcontextprotocol/inspector"
# Read at import, before the autouse fixture gives each test a fresh HOME: the inspector installs into the
# user's npm cache once (~240 MB, ~20 s of CPU) and runs from it after that (.ci/run fetches it beside mypy).
NPM_CACHE = os.environ.get("NPM_CONFIG_CACHE") or str(Path.home() / ".npm")


@pytest.mark.skipif(shutil.which("npx") is None, reason="no npx here for the MCP inspector's CLI")
def test_the_mcp_inspector_lists_the_tools(tmp_path: Path) -> None:
    with ReplayServer([]) as server:
        try:
            ran = subprocess.run(["npx", "--yes", INSPECTOR, "--cli", CROW, "mcp",
                                  "--base-url", server.base_url, "--api-key", "sk-test", "--model", "test-model",
                                  "--method", "tools/list"], capture_output=True, text=True, timeout=120,
                                 cwd=tmp_path, env={**os.environ, "NPM_CONFIG_CACHE": NPM_CACHE})
        except subprocess.TimeoutExpired:
            pytest.skip("the MCP inspector could not be fetched in time")
    if ran.returncode != 0 and "crow_run" not in ran.stdout:
        pytest.skip(f"the MCP inspector did not run here: {ran.stderr.strip()[-200:]}")
    assert "crow_run" in ran.stdout and "crow_reply" in ran.stdout


async def test_a_call_in_another_folder_is_told_crow_s_prompt_for_that_folder(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # a crow_run with `cwd` lost crow's built-in prompt (only that folder's AGENTS.md was sent): seen reading
    # mcp_server.py beside surfaces/runtime.py
    monkeypatch.setenv("CROW_DEFAULT_PROMPT", "1")
    project = tmp_path / "project"
    project.mkdir()
    (project / "AGENTS.md").write_text("Indent with tabs.")
    with ReplayServer([{"sse": text_sse("ok")}]) as server:
        async with crow_mcp(server, tmp_path) as client:
            result = await client.call_tool("crow_run", {"prompt": "hi", "cwd": str(project)})
            assert text_of(result) == "ok"
    system = server.requests[0]["messages"][0]["content"]
    assert system.startswith("You are crow") and f"Workspace: {project}" in system
    assert "Indent with tabs." in system


async def test_a_cancelled_call_stops_its_subagent_and_stores_both_histories(tmp_path: Path) -> None:
    task = {"description": "wait", "prompt": "Take your time."}
    steps = [{"sse": tool_calls_sse(("call_t", "task", task))},
             {"sse": text_sse("The child never finishes this."), "hold_after_events": 1}]
    with ReplayServer(steps) as server:
        async with crow_mcp(server, tmp_path) as client:
            call = asyncio.ensure_future(client.call_tool("crow_run", {"prompt": "Delegate"}))
            while len(server.requests) < 2:  # the child's request is in (its answer is held): polled, no margin
                await asyncio.sleep(0.02)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call

            def stored() -> tuple[list[dict[str, Any]], list[Any]] | None:
                with SessionStore() as store:
                    for info in store.recent():
                        history = store.messages(info.id)
                        if history and history[0].get("content") == "Delegate" and history[-1]["role"] == "tool":
                            return history, store.subagent_runs(info.id)
                return None

            while (found := stored()) is None:  # the cancellation reaches the server after the client stopped
                await asyncio.sleep(0.05)
    history, runs = found
    assert history[-1]["tool_call_id"] == "call_t" and history[-1]["content"] == CANCELLED
    assert [(r.call_id, r.messages[0]["content"]) for r in runs] == [("call_t", "Take your time.")]


def _peak_rss_bytes(pid: int) -> int:
    """The process's peak resident memory (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="peak memory is read from /proc")
def test_a_line_over_the_limit_is_answered_once_skipped_and_never_held(tmp_path: Path) -> None:
    # 600 MB with no newline held 672 MB: a line over the 50 MiB limit is dropped as it arrives
    from crow_cli.surfaces.stdio import LINE_LIMIT

    proc = subprocess.Popen([CROW, "mcp", "--base-url", "http://127.0.0.1:9/v1", "--api-key", "sk-test", "--model",
                             "m", "--workspace", str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=tmp_path)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
        proc.stdin.write(json.dumps(hello).encode() + b"\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == 1
        before = _peak_rss_bytes(proc.pid)
        piece = b"x" * (1 << 20)
        for _ in range(3 * LINE_LIMIT // len(piece)):  # three times the limit, no newline
            proc.stdin.write(piece)
        proc.stdin.write(b"\n" + json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
                         + b"\n" + json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).encode() + b"\n")
        proc.stdin.flush()
        refused, listed = json.loads(proc.stdout.readline()), json.loads(proc.stdout.readline())
        peak = _peak_rss_bytes(proc.pid)
        proc.stdin.close()
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert refused["id"] is None and refused["error"]["code"] == -32600
    assert listed["id"] == 2 and [t["name"] for t in listed["result"]["tools"]] == ["crow_run", "crow_reply"]
    assert peak - before < LINE_LIMIT + (16 << 20), (before, peak)  # at most the limit (and a slice) held


async def test_a_reply_keeps_the_modes_its_session_ran_under_and_is_told_them(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # a crow_run asked for read-only approval and sandbox; crow_reply to it then wrote a file under the
    # server's looser modes (yolo here), and the run had been told the server's modes
    monkeypatch.setenv("CROW_DEFAULT_PROMPT", "1")
    steps = [
        {"sse": text_sse("Looked.")},
        {"sse": tool_calls_sse(("call_w1", "write_file", {"path": "planted.txt", "content": "x"}))},
        {"sse": text_sse("Refused.")},
        {"sse": tool_calls_sse(("call_w2", "write_file", {"path": "asked.txt", "content": "y"}))},
        {"sse": text_sse("Written.")},
    ]
    with ReplayServer(steps) as server:
        async with crow_mcp(server, tmp_path, "--approval", "yolo") as client:
            first = await client.call_tool("crow_run", {"prompt": "Look", "approval": "read-only",
                                                        "sandbox": "read-only"})
            assert first.structured_content is not None
            session_id = first.structured_content["session_id"]
            reply = await client.call_tool("crow_reply", {"session_id": session_id, "prompt": "Write planted.txt"})
            assert text_of(reply) == "Refused."
            # a reply that names its modes is told to loosen them (never past the server's)
            told = await client.call_tool("crow_reply", {"session_id": session_id, "prompt": "Write asked.txt",
                                                         "approval": "yolo", "sandbox": "workspace-write"})
            assert text_of(told) == "Written."
    assert not (tmp_path / "planted.txt").exists() and (tmp_path / "asked.txt").read_text() == "y"
    assert "read-only" in tool_messages(server.requests[2])[0]["content"]
    for request in server.requests[:3]:  # told the call's modes, not the server's (yolo, workspace-write)
        system = request["messages"][0]["content"]
        assert "are not read-only are refused" in system and "may write nowhere" in system, system
        assert "calls run without asking" not in system
    assert "calls run without asking" in server.requests[4]["messages"][0]["content"]
    with SessionStore() as store:
        info = store.get(session_id)
    assert (info.approval, info.sandbox) == ("yolo", "workspace-write")


async def test_a_reply_to_a_session_whose_folder_is_gone_is_an_error_naming_it(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    with ReplayServer([{"sse": text_sse("ok")}]) as server:
        async with crow_mcp(server, tmp_path, "--approval", "yolo") as client:
            first = await client.call_tool("crow_run", {"prompt": "hi", "cwd": str(project)})
            assert first.structured_content is not None
            project.rmdir()
            with pytest.raises(MCPError) as gone:
                await client.call_tool("crow_reply", {"session_id": first.structured_content["session_id"],
                                                      "prompt": "Write here"})
    assert gone.value.code == types.INVALID_PARAMS and str(project) in gone.value.message
    assert len(server.requests) == 1  # the reply never reached the model


async def test_a_plan_call_refuses_writes_and_answers_with_the_plan(tmp_path: Path) -> None:
    # `approval: plan` for a crow_run call refuses writes; the plan exit_plan_mode hands over is its answer
    plan = "# Plan\n1. write new.txt"
    steps = [{"sse": tool_calls_sse(("call_w", "write_file", {"path": "new.txt", "content": "x"}))},
             {"sse": tool_calls_sse(("call_p", "exit_plan_mode", {"plan": plan}))}]
    with ReplayServer(steps) as server:
        async with crow_mcp(server, tmp_path, "--approval", "auto-edit") as client:
            result = await client.call_tool("crow_run", {"prompt": "plan a file", "approval": "plan"})
    assert not result.is_error and text_of(result) == plan
    assert result.structured_content is not None and result.structured_content["status"] == "completed"
    assert "the session is planning" in tool_messages(server.requests[1])[0]["content"]
    assert not (tmp_path / "new.txt").exists() and len(server.requests) == 2


def test_both_tools_offer_every_mode_and_refuse_only_a_looser_one() -> None:
    # crow_run and crow_reply take the modes' own names (`modes`), so a mode added there is offered by both,
    # and a call may ask for a mode exactly as strict as the server's or stricter
    from crow_cli.modes import APPROVAL_MODES, APPROVAL_ORDER, SANDBOX_MODES, SANDBOX_ORDER
    from crow_cli.surfaces.mcp_server import no_looser, tool_list

    def offered(schema: dict[str, Any], name: str) -> set[str]:
        return {v for option in schema["properties"][name]["anyOf"] for v in option.get("enum", ())}

    for tool in tool_list():
        assert offered(tool.input_schema, "approval") == set(APPROVAL_MODES), tool.name
        assert offered(tool.input_schema, "sandbox") == set(SANDBOX_MODES), tool.name
    for order in (APPROVAL_ORDER, SANDBOX_ORDER):
        for server in order:
            assert no_looser(None, server, order, "mode") == server
            for asked in order:
                if order.index(asked) <= order.index(server):
                    assert no_looser(asked, server, order, "mode") == asked
                else:
                    with pytest.raises(MCPError, match="looser than the server's"):
                        no_looser(asked, server, order, "mode")
