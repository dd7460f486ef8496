"""Lifecycle hooks (`crow_cli.tools.hooks`), end to end against the replay server: what a hook answers decides
inside the orchestrator, its reason reaches the model as the call's one result, and a project's hooks run only
in a trusted folder.

Hook scripts are small `sh` scripts written into each test's folder; what they were sent is read from the file
they write."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from crow_cli.errors import ConfigError
from crow_cli.tools.hooks import Hooks, HookSpec, parse_hooks
from crow_cli.trust import TrustStore
from tests.support import alive, run_here, script, text_sse, tool_calls_sse, tool_messages, wait_for

SHELL = ("c1", "run_shell", {"command": "echo ran > made.txt"})


def hook(folder: Path, name: str, body: str) -> str:
    """An executable `sh` script `folder/name` running `body`; the command that runs it."""
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return shlex.quote(str(path))


def config(folder: Path, *tables: tuple[str, dict[str, Any]]) -> Path:
    """A config file holding `[[hooks.EVENT]]` tables."""
    lines = []
    for event, keys in tables:
        lines.append(f"[[hooks.{event}]]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in keys.items()]
    path = folder / "crow.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def sent(folder: Path, name: str = "input.json") -> list[dict[str, Any]]:
    """What a hook that appends its stdin to `name` (one object a line) was sent."""
    return [json.loads(line) for line in (folder / name).read_text().splitlines() if line.strip()]


async def test_a_pretooluse_exit_2_refuses_run_shell_and_its_reason_is_the_calls_result(tmp_path: Path) -> None:
    command = hook(tmp_path, "guard.sh", f'cat >> {tmp_path}/input.json; echo "\\n" >> {tmp_path}/input.json; '
                                         'echo "no shell in this repository" >&2; exit 2')
    ran = await run_here(script([SHELL]), "go", cwd=tmp_path, yes=True, json=True,
                         config=config(tmp_path, ("PreToolUse", {"matcher": "run_shell", "command": command})))
    assert ran.code == 0, ran.stderr
    assert not (tmp_path / "made.txt").exists()
    [result] = tool_messages(ran.requests[1])
    assert result["tool_call_id"] == "c1" and "no shell in this repository" in result["content"]
    [seen] = [s for s in sent(tmp_path)]
    assert seen["hook_event_name"] == "PreToolUse" and seen["tool_name"] == "run_shell"
    assert seen["tool_input"]["command"] == "echo ran > made.txt" and seen["tool_use_id"] == "c1"
    assert seen["cwd"] == str(tmp_path.resolve()) and "session_id" in seen and "transcript_path" in seen
    events = ran.events()  # each valid against the schema
    [shown] = [e for e in events if e["type"] == "hook"]
    assert (shown["event"], shown["outcome"], shown["exit_code"], shown["call_id"]) == ("PreToolUse", "blocked", 2,
                                                                                         "c1")
    [finished] = [e for e in events if e["type"] == "tool_result"]
    assert "guard.sh" in finished["result"]["display"]["status"]  # the person reads which hook blocked it


async def test_a_json_deny_wins_over_yes(tmp_path: Path) -> None:
    answer = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                     "permissionDecisionReason": "not on Fridays"}}
    command = hook(tmp_path, "deny.sh", f"cat >/dev/null; echo {shlex.quote(json.dumps(answer))}")
    ran = await run_here(script([SHELL]), "go", cwd=tmp_path, yes=True,
                         config=config(tmp_path, ("PreToolUse", {"command": command})))
    assert not (tmp_path / "made.txt").exists()
    [result] = tool_messages(ran.requests[1])
    assert result["tool_call_id"] == "c1" and "not on Fridays" in result["content"]


async def test_a_hooks_allow_approves_but_never_past_a_deny_rule(tmp_path: Path) -> None:
    answer = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow"}}
    command = hook(tmp_path, "allow.sh", f"cat >/dev/null; echo {shlex.quote(json.dumps(answer))}")
    hooks = config(tmp_path, ("PreToolUse", {"command": command}))
    denied = await run_here(script([SHELL]), "go", cwd=tmp_path, config=hooks, flags={"deny": ["run_shell"]})
    [result] = tool_messages(denied.requests[1])
    assert "denied by the rule 'run_shell'" in result["content"] and not (tmp_path / "made.txt").exists()
    # nobody could answer here (no terminal): without the hook's allow the call would be refused
    allowed = await run_here(script([SHELL]), "go", cwd=tmp_path, config=hooks)
    [result] = tool_messages(allowed.requests[1])
    assert result["tool_call_id"] == "c1" and (tmp_path / "made.txt").read_text() == "ran\n", result


async def test_a_hooks_ask_asks_under_yes_and_nobody_to_ask_refuses(tmp_path: Path) -> None:
    answer = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "ask"}}
    command = hook(tmp_path, "ask.sh", f"cat >/dev/null; echo {shlex.quote(json.dumps(answer))}")
    ran = await run_here(script([SHELL]), "go", cwd=tmp_path, yes=True,
                         config=config(tmp_path, ("PreToolUse", {"command": command})))
    [result] = tool_messages(ran.requests[1])
    assert "nobody can approve it here" in result["content"] and not (tmp_path / "made.txt").exists()


async def test_updated_input_runs_the_call_with_the_hooks_arguments(tmp_path: Path) -> None:
    answer = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow",
                                     "updatedInput": {"command": "echo safer > made.txt"}}}
    command = hook(tmp_path, "rewrite.sh", f"cat >/dev/null; echo {shlex.quote(json.dumps(answer))}")
    await run_here(script([SHELL]), "go", cwd=tmp_path, config=config(tmp_path, ("PreToolUse", {"command": command})))
    assert (tmp_path / "made.txt").read_text() == "safer\n"


async def test_posttooluse_receives_the_tools_input_and_response(tmp_path: Path) -> None:
    command = hook(tmp_path, "post.sh", f"cat >> {tmp_path}/input.json; echo >> {tmp_path}/input.json; "
                                        "echo 'remember to run the tests' >&2; exit 2")
    call = ("c7", "run_shell", {"command": "echo hello-from-the-tool"})
    ran = await run_here(script([call]), "go", cwd=tmp_path, yes=True,
                         config=config(tmp_path, ("PostToolUse", {"matcher": "run_.*", "command": command})))
    [seen] = sent(tmp_path)
    assert seen["hook_event_name"] == "PostToolUse" and seen["tool_name"] == "run_shell"
    assert seen["tool_input"] == {"command": "echo hello-from-the-tool"} and seen["tool_use_id"] == "c7"
    assert "hello-from-the-tool" in seen["tool_response"]["output"] and seen["tool_response"]["ok"] is True
    [result] = tool_messages(ran.requests[1])  # exit 2 after the fact: the model reads it beside the result
    assert result["tool_call_id"] == "c7" and "hello-from-the-tool" in result["content"]
    assert "remember to run the tests" in result["content"]


async def test_a_json_block_reason_reaches_the_model_without_controls_and_bounded(tmp_path: Path) -> None:
    """A hook's reason is text from outside: JSON escapes cannot put control characters into what the model
    reads, and a reason is held to MAX_CONTEXT_CHARS as context is."""
    from crow_cli.tools.hooks import MAX_CONTEXT_CHARS

    answer = json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                                "permissionDecisionReason": "no\u001b[2J shell " + "x" * 40_000}})
    (tmp_path / "answer.json").write_text(answer)
    command = hook(tmp_path, "deny.sh", f"cat >/dev/null; cat {tmp_path}/answer.json")
    ran = await run_here(script([SHELL]), "go", cwd=tmp_path, yes=True,
                         config=config(tmp_path, ("PreToolUse", {"matcher": "run_shell", "command": command})))
    assert ran.code == 0, ran.stderr
    [result] = tool_messages(ran.requests[1])
    assert "no[2J shell" in result["content"] and "\x1b" not in result["content"]
    assert len(result["content"]) < MAX_CONTEXT_CHARS + 500 and not (tmp_path / "made.txt").exists()


async def test_a_matcher_that_does_not_match_runs_nothing(tmp_path: Path) -> None:
    command = hook(tmp_path, "never.sh", f"touch {tmp_path}/ran; exit 2")
    await run_here(script([SHELL]), "go", cwd=tmp_path, yes=True,
                   config=config(tmp_path, ("PreToolUse", {"matcher": "write_file|edit_file", "command": command})))
    assert not (tmp_path / "ran").exists() and (tmp_path / "made.txt").exists()


async def test_userpromptsubmit_context_reaches_the_request(tmp_path: Path) -> None:
    command = hook(tmp_path, "context.sh", f"cat >> {tmp_path}/input.json; echo 'The build is red on main.'")
    ran = await run_here([{"sse": text_sse("ok")}], "what now?", cwd=tmp_path,
                         config=config(tmp_path, ("UserPromptSubmit", {"command": command})))
    assert ran.code == 0, ran.stderr
    last = ran.requests[0]["messages"][-1]
    assert last["role"] == "user" and "what now?" in last["content"]
    assert "The build is red on main." in last["content"]
    assert sent(tmp_path)[0]["prompt"] == "what now?"


async def test_a_userpromptsubmit_block_drops_the_prompt(tmp_path: Path) -> None:
    command = hook(tmp_path, "block.sh", "cat >/dev/null; echo 'that prompt holds a key' >&2; exit 2")
    ran = await run_here([{"sse": text_sse("never sent")}], "my key is sk-1234", cwd=tmp_path,
                         config=config(tmp_path, ("UserPromptSubmit", {"command": command})))
    assert ran.code == 1 and ran.requests == []
    assert "that prompt holds a key" in ran.stderr


async def test_a_stop_hooks_exit_2_makes_one_more_turn(tmp_path: Path) -> None:
    command = hook(tmp_path, "stop.sh", f"cat >> {tmp_path}/input.json; echo >> {tmp_path}/input.json; "
                                        "echo 'the tests were not run' >&2; exit 2")
    ran = await run_here([{"sse": text_sse("Done.")}, {"sse": text_sse("Ran them: green.")}], "fix it",
                         cwd=tmp_path, config=config(tmp_path, ("Stop", {"command": command})))
    assert ran.code == 0, ran.stderr
    assert len(ran.requests) == 2  # one more turn, then the bound: stop_hook_active
    assert ran.requests[1]["messages"][-1] == {"role": "user", "content": "the tests were not run"}
    assert [s["stop_hook_active"] for s in sent(tmp_path)] == [False, True]
    assert ran.stdout.strip().endswith("Ran them: green.")
    assert "Done.\nRan them: green." in ran.stdout  # two answers, each on its own line
    assert "goes on once" in ran.stderr


async def test_a_hook_that_hangs_is_killed_at_its_timeout_and_the_run_goes_on(tmp_path: Path) -> None:
    command = hook(tmp_path, "hang.sh", f"sleep 300 & echo $! > {tmp_path}/child; wait")
    ran = await run_here(script([SHELL]), "go", cwd=tmp_path, yes=True,
                         config=config(tmp_path, ("PreToolUse", {"command": command, "timeout_s": 0.5})))
    assert (tmp_path / "made.txt").exists()  # a non-blocking error: the call ran
    assert "timeout_s" in ran.stderr and "the run goes on" in ran.stderr
    child = int((tmp_path / "child").read_text())
    wait_for(lambda: not alive(child))  # its process group went with it (SIGKILL lands a moment later)


async def test_a_hook_that_fails_is_one_warning_and_the_run_goes_on(tmp_path: Path) -> None:
    hook(tmp_path, "broken.sh", "echo 'jq: not found' >&2; exit 127")
    command = "sh broken.sh"  # hooks run in the workspace
    ran = await run_here(script([SHELL]), "go", cwd=tmp_path, yes=True,
                         config=config(tmp_path, ("PreToolUse", {"command": command})))
    assert (tmp_path / "made.txt").exists()
    assert [line for line in ran.stderr.splitlines() if "warning" in line] == [
        f"crow: warning: PreToolUse hook `{command}` ({tmp_path / 'crow.toml'}) failed (exit code 127: jq: not "
        "found); the run goes on"]


async def test_hooks_get_no_api_key_in_their_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_TOKEN_COPY", "sk-test")  # the run's key, under another name
    command = hook(tmp_path, "env.sh", f"env > {tmp_path}/env.txt")
    await run_here(script([SHELL]), "go", cwd=tmp_path, yes=True,
                   config=config(tmp_path, ("PreToolUse", {"command": command})))
    env = (tmp_path / "env.txt").read_text()
    assert "sk-test" not in env and f"CLAUDE_PROJECT_DIR={tmp_path.resolve()}" in env


PROJECT_HOOK = '[[hooks.PreToolUse]]\ncommand = "touch {marker}; exit 2"\n'


async def test_an_untrusted_projects_hook_does_not_run(tmp_path: Path) -> None:
    project = tmp_path / "repo"
    (project / ".git").mkdir(parents=True)
    (project / ".crow").mkdir()
    (project / ".crow" / "settings.toml").write_text(PROJECT_HOOK.format(marker=tmp_path / "ran"))
    ran = await run_here(script([SHELL]), "go", cwd=project, yes=True)
    assert not (tmp_path / "ran").exists() and (project / "made.txt").exists()
    assert f"the project hooks in {project / '.crow' / 'settings.toml'} do not run" in ran.stderr
    TrustStore().set(project, True)  # the person said yes (on a terminal, `crow chat` asks)
    (project / "made.txt").unlink()
    await run_here(script([SHELL]), "go", cwd=project, yes=True)
    assert (tmp_path / "ran").exists() and not (project / "made.txt").exists()


def test_parse_hooks_refuses_what_it_cannot_run() -> None:
    for table, message in [({"PreToolUse": [{"matcher": "x"}]}, "needs a command"),
                           ({"OnSave": [{"command": "x"}]}, "unknown hook event 'OnSave'"),
                           ({"Stop": [{"command": "x", "timeout": 3}]}, "unknown key 'timeout'"),
                           ({"Stop": [{"command": "x", "timeout_s": 0}]}, "greater than 0"),
                           ({"PreToolUse": [{"command": "x", "matcher": "("}]}, "is not a pattern")]:
        with pytest.raises(ConfigError, match=message):
            parse_hooks(table, "crow.toml")


def test_identical_commands_run_once_and_matchers_match_whole_names() -> None:
    hooks = Hooks([HookSpec("PreToolUse", "a", "run_shell"), HookSpec("PreToolUse", "a", ""),
                   HookSpec("PreToolUse", "b", "run"), HookSpec("PreToolUse", "c", "mcp__.*")])
    assert [s.command for s in hooks.matching("PreToolUse", "run_shell")] == ["a"]
    assert [s.command for s in hooks.matching("PreToolUse", "mcp__docs__search")] == ["a", "c"]


async def test_a_cancelled_hook_is_killed_with_its_group(tmp_path: Path) -> None:
    import asyncio

    hooks = Hooks([HookSpec("Stop", f"sleep 300 & echo $! > {tmp_path}/child; wait")], cwd=tmp_path)
    task = asyncio.ensure_future(hooks.fire("Stop"))
    while not (tmp_path / "child").exists() or not (tmp_path / "child").read_text().strip():
        await asyncio.sleep(0.01)
    child = int((tmp_path / "child").read_text())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    while alive(child):  # SIGKILL lands a moment after it is sent
        await asyncio.sleep(0.01)


async def test_precompact_fires_before_the_summary_is_asked_for(tmp_path: Path) -> None:
    from crow_cli.history import ToolCall, assistant_message, tool_message, user_message
    from crow_cli.sessions import SessionStore
    from tests.replay_server import text_stream

    with SessionStore() as store:
        info = store.create(model="test-model", cwd=str(tmp_path))
        for n in range(12):
            for message in (user_message(f"request {n}"),
                            assistant_message(None, [ToolCall(f"call_{n}", "read_file", '{"path": "a.txt"}')]),
                            tool_message(f"call_{n}", "y" * 1200), assistant_message(f"answer {n}")):
                store.append(info.id, message)
    command = hook(tmp_path, "compact.sh", f"cat >> {tmp_path}/input.json; echo >> {tmp_path}/input.json")
    path = config(tmp_path, ("PreCompact", {"command": command}))
    path.write_text("context_window = 4096\nmax_retries = 0\n" + path.read_text())
    ran = await run_here([{"sse": text_stream("SUMMARY")}, {"sse": text_stream("Done.")}], "go on", cwd=tmp_path,
                         config=path, session_id=info.id)
    assert ran.code == 0, ran.stderr
    [seen] = sent(tmp_path)
    assert (seen["hook_event_name"], seen["trigger"], seen["session_id"]) == ("PreCompact", "auto", info.id)


async def test_a_notification_hook_runs_while_an_approval_question_waits(tmp_path: Path) -> None:
    import asyncio
    from dataclasses import replace

    from crow_cli.history import ToolCall
    from crow_cli.tools.approval import Answer, make_approver
    from crow_cli.tools.context import ToolContext
    from crow_cli.tools.dispatch import dispatch
    from crow_cli.tools.registry import default_registry

    command = hook(tmp_path, "notify.sh", f"cat > {tmp_path}/input.json.part; mv {tmp_path}/input.json.part "
                                          f"{tmp_path}/input.json")

    async def ask(question: object) -> Answer:  # asked at once: the hook runs beside the question
        while not (tmp_path / "input.json").exists():
            await asyncio.sleep(0.01)
        return Answer("no")

    hooks = Hooks(parse_hooks({"Notification": [{"command": command}]}, "crow.toml"), cwd=tmp_path)
    context = replace(ToolContext.for_workspace(tmp_path), hooks=hooks)
    events = [e async for e in dispatch([ToolCall("n1", "run_shell", '{"command": "true"}')], default_registry(),
                                        approve=make_approver("ask", ask=ask), context=context)]
    [seen] = sent(tmp_path)
    assert seen["hook_event_name"] == "Notification" and seen["notification_type"] == "permission_prompt"
    assert "run_shell" in seen["message"] and "declined" in events[-1].result.output


async def test_continue_false_ends_the_run_after_the_turns_calls(tmp_path: Path) -> None:
    answer = {"continue": False, "stopReason": "the budget for today is spent"}
    command = hook(tmp_path, "stop-all.sh", f"cat >/dev/null; echo {shlex.quote(json.dumps(answer))}")
    ran = await run_here(script([SHELL]), "go", cwd=tmp_path, yes=True, json=True,
                         config=config(tmp_path, ("PreToolUse", {"command": command})))
    assert ran.code == 0 and len(ran.requests) == 1 and not (tmp_path / "made.txt").exists()
    events = ran.events()
    [stopped] = [e for e in events if e["type"] == "notice" and e["code"] == "hook_stopped"]
    assert "the budget for today is spent" in stopped["message"]
    assert events[-1]["type"] == "run_finished" and events[-1]["status"] == "completed"


async def test_a_blocked_prompt_in_json_mode_ends_with_run_finished(tmp_path: Path) -> None:
    block = hook(tmp_path, "block.sh", "cat >/dev/null; echo 'not today' >&2; exit 2")
    end = hook(tmp_path, "end.sh", f"cat > {tmp_path}/ended.json")
    ran = await run_here([{"sse": text_sse("never sent")}], "hi", cwd=tmp_path, json=True,
                         config=config(tmp_path, ("UserPromptSubmit", {"command": block}),
                                       ("SessionEnd", {"command": end})))
    events = ran.events()
    assert ran.code == 1 and events[-1]["type"] == "run_finished" and "not today" in events[-1]["error"]
    assert json.loads((tmp_path / "ended.json").read_text())["hook_event_name"] == "SessionEnd"


async def test_a_subagent_fires_subagentstop_not_stop_and_its_calls_meet_pretooluse(tmp_path: Path) -> None:
    log = tmp_path / "input.json"
    command = hook(tmp_path, "log.sh", f"cat >> {log}; echo >> {log}")
    task = ("call_t", "task", {"description": "look", "prompt": "Run a command."})
    ran = await run_here([{"sse": tool_calls_sse(task)},
                          {"sse": tool_calls_sse(("child_1", "run_shell", {"command": "true"}))},
                          {"sse": text_sse("Child done.")}, {"sse": text_sse("Parent done.")}],
                         "go", cwd=tmp_path, yes=True,
                         config=config(tmp_path, ("SubagentStop", {"command": command}), ("Stop", {"command": command}),
                                       ("PreToolUse", {"command": command})))
    assert ran.code == 0, ran.stderr
    seen = [(s["hook_event_name"], s.get("tool_name")) for s in sent(tmp_path)]
    assert seen == [("PreToolUse", "task"), ("PreToolUse", "run_shell"), ("SubagentStop", None), ("Stop", None)]


async def test_a_deny_too_long_to_read_whole_still_refuses_the_call(tmp_path: Path) -> None:
    """A PreToolUse answer cut at MAX_OUTPUT_BYTES is a deny crow could not read: the call is refused, not run as
    if the hook had said nothing (a deny quoting a long diff ran run_shell under --yes)."""
    answer = json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                                "permissionDecisionReason": "no shell " + "x" * 200_000}})
    (tmp_path / "answer.json").write_text(answer)
    command = hook(tmp_path, "deny.sh", f"cat >/dev/null; cat {tmp_path}/answer.json")
    ran = await run_here(script([SHELL]), "go", cwd=tmp_path, yes=True,
                         config=config(tmp_path, ("PreToolUse", {"matcher": "run_shell", "command": command})))
    assert not (tmp_path / "made.txt").exists()
    [result] = tool_messages(ran.requests[1])
    assert result["tool_call_id"] == "c1" and "64 KiB" in result["content"], result["content"]


async def test_the_arguments_a_hook_gave_are_shown_to_the_person(tmp_path: Path) -> None:
    # the tool line shows the arguments a hook gave, escaped, so under --yes the person sees the command that
    # runs, not the model's `run_shell(echo ran > made.txt)`
    answer = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow",
                                     "updatedInput": {"command": "echo safer\u001b[2J > made.txt"}}}
    command = hook(tmp_path, "rewrite.sh", f"cat >/dev/null; echo {shlex.quote(json.dumps(answer))}")
    ran = await run_here(script([SHELL]), "go", cwd=tmp_path, yes=True,
                         config=config(tmp_path, ("PreToolUse", {"command": command})))
    said = [line for line in ran.stderr.splitlines() if "changed the arguments" in line]
    assert len(said) == 1 and "[c1]" in said[0] and '"echo safer\\u001b[2J > made.txt"' in said[0], ran.stderr
    assert "\x1b" not in ran.stderr
