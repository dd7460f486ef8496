"""The built-in `task` tool (`surfaces.task`): a subagent's history, tools, model and server are its own, its answer
is the parent call's one result, servers with few slots are never overloaded, and cancellation leaves every call
(the parent's and the child's) with one result. Black-box against the replay server."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

from crow_cli.config import Settings
from crow_cli.events import SubagentEvent, SubagentFinished, SubagentStarted, ToolResultReady
from crow_cli.history import ToolCall
from crow_cli.sessions import SessionStore
from crow_cli.surfaces.task import Subagents
from crow_cli.tools import builtin
from crow_cli.tools.approval import Answer, ApprovalPolicy, Approvals, Question
from crow_cli.tools.dispatch import dispatch
from crow_cli.tools.registry import ToolRegistry
from tests.replay_server import ReplayServer
from tests.support import argv, crow_here, run_here, text_sse, tool_calls_sse, wait_for

PARENT_PROMPT = "PARENT-ONLY: the secret plan is ZEBRA"


def _user_agent(name: str, body: str = "You explore code and answer briefly.", **meta: str) -> Path:
    """An agent file in crow's config folder (`agents/NAME.md`)."""
    folder = Path.home() / ".config" / "crow" / "agents"
    folder.mkdir(parents=True, exist_ok=True)
    lines = "".join(f"{k}: {v}\n" for k, v in {"name": name, "description": f"the {name} agent", **meta}.items())
    path = folder / f"{name}.md"
    path.write_text(f"---\n{lines}---\n{body}\n")
    return path


def _task(call_id: str, prompt: str, agent: str | None = None) -> tuple[str, str, dict[str, Any]]:
    args = {"description": "look around", "prompt": prompt, **({"agent": agent} if agent else {})}
    return call_id, "task", args


def _tool_names(request: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in request.get("tools", [])}


def _results(request: dict[str, Any]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in request["messages"] if m["role"] == "tool"}


async def test_the_child_request_carries_none_of_the_parents_messages_and_the_agents_model(tmp_path: Path) -> None:
    _user_agent("explorer", tools="Read, Grep", model="small-model")
    script = [{"sse": tool_calls_sse(_task("call_task_1", "Find where the answer is defined.", "explorer"))},
              {"sse": text_sse("It is in answer.py, line 3.")},
              {"sse": text_sse("The answer is in answer.py.")}]
    ran = await run_here(script, PARENT_PROMPT, cwd=tmp_path, json=True)
    assert ran.code == 0, ran.stderr
    parent, child, after = ran.requests
    assert child["model"] == "small-model" and parent["model"] == "test-model"
    assert [m["role"] for m in child["messages"]] == ["system", "user"]
    assert child["messages"][0]["content"].endswith("You explore code and answer briefly.")
    assert child["messages"][1]["content"] == "Find where the answer is defined."
    assert "ZEBRA" not in json.dumps(child)  # nothing of the parent's conversation
    assert _tool_names(child) == {"read_file", "search_files"}
    assert _results(after) == {"call_task_1": "It is in answer.py, line 3."}  # under the parent call's own id
    events = ran.events()
    started = [e for e in events if e["type"] == "subagent_started"]
    finished = [e for e in events if e["type"] == "subagent_finished"]
    assert [(e["call_id"], e["agent"], e["model"]) for e in started] == [("call_task_1", "explorer", "small-model")]
    assert [(e["call_id"], e["status"]) for e in finished] == [("call_task_1", "completed")]


async def test_a_child_cannot_start_a_subagent(tmp_path: Path) -> None:
    script = [{"sse": tool_calls_sse(_task("call_1", "Do it yourself."))},
              {"sse": tool_calls_sse(_task("child_1", "Delegate again."))},
              {"sse": text_sse("I could not delegate.")},
              {"sse": text_sse("Done.")}]
    ran = await run_here(script, "go", cwd=tmp_path)
    assert ran.code == 0, ran.stderr
    parent, child, child_again, after = ran.requests
    assert "task" in _tool_names(parent) and "task" not in _tool_names(child)
    assert "unknown tool 'task'" in _results(child_again)["child_1"]
    assert _results(after) == {"call_1": "I could not delegate."}


async def test_a_deny_rule_of_the_parent_holds_for_the_child(tmp_path: Path) -> None:
    script = [{"sse": tool_calls_sse(_task("call_1", "Run the tests."))},
              {"sse": tool_calls_sse(("child_1", "run_shell", {"command": "touch made-by-child"}))},
              {"sse": text_sse("The shell was refused.")},
              {"sse": text_sse("Done.")}]
    ran = await run_here(script, "go", cwd=tmp_path, yes=True, flags={"deny": ["run_shell"]})
    assert ran.code == 0, ran.stderr
    refused = _results(ran.requests[2])["child_1"]
    assert "denied by the rule" in refused and not (tmp_path / "made-by-child").exists()


async def test_a_profile_sends_the_child_to_its_own_server_without_the_parents_key(tmp_path: Path) -> None:
    _user_agent("local", profile="small")
    with ReplayServer([{"sse": text_sse("Explored on the small server.")}]) as small:
        config = tmp_path / "crow.toml"
        config.write_text(f'[profiles.small]\nbase_url = "{small.base_url}"\nmodel = "tiny"\n')
        script = [{"sse": tool_calls_sse(_task("call_1", "Explore.", "local"))}, {"sse": text_sse("Done.")}]
        ran = await run_here(script, "go", cwd=tmp_path, config=config)
        assert ran.code == 0, ran.stderr
        (child,) = small.raw_requests
    assert child["body"]["model"] == "tiny"
    assert "sk-test" not in json.dumps(child["headers"])  # the parent's key stays with the parent's server
    assert _results(ran.requests[1]) == {"call_1": "Explored on the small server."}


def test_two_children_against_a_server_limited_to_one_never_overlap(tmp_path: Path) -> None:
    config = tmp_path / "crow.toml"
    config.write_text("[provider]\nmax_concurrent_requests = 1\n")
    script = [{"sse": tool_calls_sse(_task("call_a", "First."), _task("call_b", "Second."))},
              {"sse": text_sse("child answer one"), "hold_after_events": 1},
              {"sse": text_sse("child answer two")},
              {"sse": text_sse("Both done.")}]
    with ReplayServer(script) as server:
        proc = subprocess.Popen(argv(server.base_url, "--json", "go", config=config), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, cwd=tmp_path)
        try:
            assert proc.stdout is not None
            for line in proc.stdout:  # the second child waits for the slot the first one holds
                event = json.loads(line)
                if event["type"] == "subagent_event" and event["event"].get("code") == "queued":
                    break
                if server.max_active > 1:  # both requests are in: the limit did not hold
                    break
            server.release()
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, err
        assert server.max_active == 1
        results = _results(server.requests[-1])
    assert set(results) == {"call_a", "call_b"}
    assert sorted(results.values()) == ["child answer one", "child answer two"]


def test_ctrl_c_stops_the_children_and_every_call_gets_one_result(tmp_path: Path) -> None:
    script = [{"sse": tool_calls_sse(_task("call_a", "First."), _task("call_b", "Second."))},
              {"sse": text_sse("never finished one"), "hold_after_events": 1},
              {"sse": text_sse("never finished two"), "hold_after_events": 1}]
    with ReplayServer(script) as server:
        proc = subprocess.Popen(argv(server.base_url, "--json", "go"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, text=True, cwd=tmp_path)
        try:
            wait_for(lambda: len(server.requests) == 3 or proc.poll() is not None)  # both children streaming
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 130, err
    events = [json.loads(line) for line in out.splitlines()]
    results = [e["result"] for e in events if e["type"] == "tool_result"]
    assert sorted((r["call_id"], r["outcome"]) for r in results) == [("call_a", "cancelled"), ("call_b", "cancelled")]
    assert sorted((e["call_id"], e["status"]) for e in events if e["type"] == "subagent_finished") == [
        ("call_a", "cancelled"), ("call_b", "cancelled")]
    with SessionStore() as store:
        info = store.latest()
        assert info is not None
        stored = store.messages(info.id)
        runs = store.subagent_runs(info.id)
    assert [(m["role"], m.get("tool_call_id")) for m in stored[-2:]] == [("tool", "call_a"), ("tool", "call_b")]
    assert sorted(r.call_id for r in runs) == ["call_a", "call_b"]
    for run in runs:  # each child's history is kept, its prompt first
        assert run.messages[0] == {"role": "user", "content": "First." if run.call_id == "call_a" else "Second."}


async def test_sessions_show_shows_the_childs_transcript_under_the_parents_call(tmp_path: Path, capsys: Any) -> None:
    script = [{"sse": tool_calls_sse(_task("call_1", "Count the files."))},
              {"sse": tool_calls_sse(("child_1", "list_directory", {"path": "."}))},
              {"sse": text_sse("There are no files.")},
              {"sse": text_sse("Done.")}]
    ran = await run_here(script, "go", cwd=tmp_path, json=True)
    assert ran.code == 0, ran.stderr
    session_id = ran.events()[0]["session_id"]
    assert crow_here("sessions", "show", session_id) == 0
    shown = capsys.readouterr().out
    assert "### Subagent `general` (call `call_1`)" in shown
    assert shown.index("#### You\n\nCount the files.") > shown.index("**Tool result** (`call_1`)")
    assert "list_directory" in shown and "There are no files." in shown


async def test_the_childs_approval_question_is_labelled_with_the_agents_name(tmp_path: Path) -> None:
    asked: list[Question] = []

    async def ask(question: Question) -> Answer:
        asked.append(question)
        return Answer("no")

    script = [{"sse": tool_calls_sse(("child_1", "write_file", {"path": "a.txt", "content": "x"}))},
              {"sse": text_sse("Not allowed.")}]
    with ReplayServer(script) as server:
        settings = Settings(model="test-model", base_url=server.base_url, api_key="sk-test")
        subagents = Subagents(lambda: settings)
        registry = ToolRegistry()
        for tool in [*builtin.BUILTIN_TOOLS, subagents.tool]:
            registry.register(tool)
        call = ToolCall("call_1", "task", json.dumps({"description": "write", "prompt": "Write a.txt"}))
        events = [e async for e in dispatch([call], registry, approve=Approvals(ApprovalPolicy("ask"), ask))]
    assert [q.preview.startswith("[subagent general] ") for q in asked] == [True]
    (result,) = [e.result for e in events if isinstance(e, ToolResultReady)]
    assert (result.call_id, result.output) == ("call_1", "Not allowed.")
    started = [e for e in events if isinstance(e, SubagentStarted)]
    inner = [e.event for e in events if isinstance(e, SubagentEvent) and isinstance(e.event, ToolResultReady)]
    assert [s.call_id for s in started] == ["call_1"] and [r.result.outcome for r in inner] == ["denied"]


async def _dispatch_task(subagents: Subagents, registry: ToolRegistry, call: ToolCall) -> list[Any]:
    registry.register(subagents.tool)
    return [e async for e in dispatch([call], registry, approve=Approvals(ApprovalPolicy("yolo")))]


async def test_a_timeout_stops_the_child_and_its_call_gets_one_result() -> None:
    script = [{"sse": text_sse("never finished"), "hold_after_events": 1}]
    with ReplayServer(script) as server:
        settings = Settings(model="test-model", base_url=server.base_url, api_key="sk-test")
        subagents = Subagents(lambda: settings)
        subagents.tool.timeout_s = 0.5  # the server holds the child's answer until the test ends
        call = ToolCall("call_1", "task", json.dumps({"description": "wait", "prompt": "Wait."}))
        events = await _dispatch_task(subagents, ToolRegistry(), call)
    results = [e.result for e in events if isinstance(e, ToolResultReady)]
    assert [(r.call_id, r.outcome) for r in results] == [("call_1", "timeout")]
    assert [e.status for e in events if isinstance(e, SubagentFinished)] == ["cancelled"]


async def test_the_subagent_stop_hook_can_make_the_child_go_on_once() -> None:
    seen: list[tuple[str, str, bool]] = []

    async def on_stop(agent: str, call: ToolCall, history: list[Any], active: bool) -> str | None:
        seen.append((agent, call.id, active))
        return "Check it once more."

    script = [{"sse": text_sse("First answer.")}, {"sse": text_sse("Checked answer.")}]
    with ReplayServer(script) as server:
        settings = Settings(model="test-model", base_url=server.base_url, api_key="sk-test")
        subagents = Subagents(lambda: settings)
        subagents.on_stop = on_stop
        call = ToolCall("call_1", "task", json.dumps({"description": "check", "prompt": "Answer."}))
        events = await _dispatch_task(subagents, ToolRegistry(), call)
        second = server.requests[1]["messages"]
    assert seen == [("general", "call_1", False), ("general", "call_1", True)]  # the second reason is not obeyed
    assert second[-1] == {"role": "user", "content": "Check it once more."}
    assert [e.result.output for e in events if isinstance(e, ToolResultReady)] == ["Checked answer."]


async def test_project_agents_act_only_in_a_trusted_folder(tmp_path: Path) -> None:
    from crow_cli.trust import TrustStore, project_root

    folder = tmp_path / ".crow" / "agents"
    folder.mkdir(parents=True)
    (folder / "repo-agent.md").write_text("---\ndescription: the repository's agent\nmodel: repo-model\n---\nHi.\n")
    script = [{"sse": tool_calls_sse(_task("call_1", "Go.", "repo-agent"))}, {"sse": text_sse("Done.")}]
    ran = await run_here(script, "go", cwd=tmp_path)
    assert ran.code == 0, ran.stderr
    assert f"the agents in {folder} are not used: this folder is not trusted" in ran.stderr
    assert "unknown agent 'repo-agent'" in _results(ran.requests[1])["call_1"]
    assert "repo-agent" not in json.dumps(ran.requests[0]["tools"])  # not offered either

    TrustStore().set(project_root(tmp_path), True)
    script = [{"sse": tool_calls_sse(_task("call_1", "Go.", "repo-agent"))}, {"sse": text_sse("Hi back.")},
              {"sse": text_sse("Done.")}]
    ran = await run_here(script, "go", cwd=tmp_path)
    assert ran.code == 0, ran.stderr
    assert ran.requests[1]["model"] == "repo-model" and "not trusted" not in ran.stderr


async def test_the_childs_system_prompt_names_its_own_tools_not_task(tmp_path: Path) -> None:
    _user_agent("reader", tools="Read")
    script = [{"sse": tool_calls_sse(_task("call_1", "Read it.", "reader"))}, {"sse": text_sse("Read.")},
              {"sse": text_sse("Done.")}]
    ran = await run_here(script, "go", cwd=tmp_path, flags={"default_prompt": True})
    assert ran.code == 0, ran.stderr
    parent_system = ran.requests[0]["messages"][0]["content"]
    child_system = ran.requests[1]["messages"][0]["content"]
    assert "subagent with task" in parent_system and "subagent with task" not in child_system
    assert "read_file" in child_system and "run_shell" not in child_system
    assert child_system.endswith("You explore code and answer briefly.") and "PARENT" not in child_system


async def test_hooks_guard_a_childs_calls_and_its_end_is_subagent_stop_not_stop(tmp_path: Path) -> None:
    def hook(name: str, body: str) -> str:
        path = tmp_path / name
        path.write_text(f"#!/bin/sh\ncat >> {tmp_path}/{name}.json; echo >> {tmp_path}/{name}.json\n{body}\n")
        path.chmod(0o755)
        return str(path)

    config = tmp_path / "crow.toml"
    guard = hook("guard", "echo no shell >&2; exit 2")
    config.write_text(f'[[hooks.PreToolUse]]\nmatcher = "run_shell"\ncommand = "{guard}"\n'
                      f'[[hooks.SubagentStop]]\ncommand = "{hook("substop", "echo check again >&2; exit 2")}"\n'
                      f'[[hooks.Stop]]\ncommand = "{hook("stop", "exit 0")}"\n')
    script = [{"sse": tool_calls_sse(_task("call_1", "Run it."))},
              {"sse": tool_calls_sse(("child_1", "run_shell", {"command": "touch made"}))},
              {"sse": text_sse("Refused.")}, {"sse": text_sse("Checked again.")},
              {"sse": text_sse("Done.")}]
    ran = await run_here(script, "go", cwd=tmp_path, yes=True, config=config)
    assert ran.code == 0, ran.stderr
    assert "no shell" in _results(ran.requests[2])["child_1"] and not (tmp_path / "made").exists()
    assert ran.requests[3]["messages"][-1] == {"role": "user", "content": "check again"}  # the child went on once
    assert _results(ran.requests[4]) == {"call_1": "Checked again."}
    substop = [json.loads(line) for line in (tmp_path / "substop.json").read_text().splitlines() if line.strip()]
    assert [(s["hook_event_name"], s["agent"], s["stop_hook_active"]) for s in substop] == [
        ("SubagentStop", "general", False), ("SubagentStop", "general", True)]
    stops = [line for line in (tmp_path / "stop.json").read_text().splitlines() if line.strip()]
    assert len(stops) == 1  # the parent's end only
