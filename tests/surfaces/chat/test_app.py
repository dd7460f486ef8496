"""`crow chat`'s app (`surfaces/chat/app`), end to end: in-process (prompt-toolkit pipe input, DummyOutput) or
on a real terminal (a pty), against a replay server on a real socket.

Properties guarded here:

- a turn with tool calls, approval (policy rules, a denied call gets a result, `crow run`'s preview of the
  call at the prompt, no output line on the prompt's line) and `--yes` letting no escape out of the sandbox;
- Ctrl-C in a tool, while streaming or at an approval prompt stops the turn and leaves a valid history;
  SIGTERM / SIGHUP (or a terminal gone) end the chat with a valid stored session and exit code 143 / 129;
- `--resume` repairs a crashed turn; the chat holds only its session and leaves it free when it ends; state
  folders are private; a bad system file or a damaged store is one line;
- typed input: a non-UTF-8 byte, an escape sequence, Tab completion of prompt files, `!` shell commands;
- the prompt is up before the SDK or a slow MCP server has loaded, and tools join while it waits.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import stat
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput
from prompt_toolkit.output.plain_text import PlainTextOutput
from rich.console import Console

from crow_cli.config import Settings
from crow_cli.errors import ConfigError, SessionError
from crow_cli.history import ToolCall
from crow_cli.sessions import SessionStore
from crow_cli.surfaces.chat.app import ChatApp, ChatOptions
from crow_cli.tools.approval import describe_call
from crow_cli.tools.builtin import BUILTIN_TOOLS
from crow_cli.tools.context import ToolContext
from tests.replay_server import ReplayServer, text_stream
from tests.support import (
    CANCELLED,
    ChatTerminal,
    assert_valid,
    authorless,
    chat,
    chat_options,
    chunk,
    needs_sandbox,
    sse,
    text_sse,
    tool_calls_sse,
    wait_for,
)


async def test_turn_with_tool_calls(store: SessionStore, tools_dir: Path) -> None:
    usage = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
    script = [
        {"sse": tool_calls_sse(("call_a", "quick", {"text": "one"}), ("call_b", "guarded", {"text": "two"}),
                               usage=usage)},
        {"sse": text_stream("Both tools ran.")},
    ]
    keys = "use the tools\ra\r/usage\r/exit\r"  # `a`: always allow `guarded`
    output, server, app = await chat(script, keys, store, options=chat_options(tools_dirs=(str(tools_dir),)))

    sent = server.requests[1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool"]
    assert [c["id"] for c in sent[1]["tool_calls"]] == ["call_a", "call_b"]
    assert sent[2] == {"role": "tool", "tool_call_id": "call_a", "content": "echo: one"}
    assert sent[3] == {"role": "tool", "tool_call_id": "call_b", "content": "guarded ran: two"}
    assert server.requests[0]["stream_options"] == {"include_usage": True}
    assert "→ quick({\"text\": \"one\"})" in output
    assert "ok quick" in output and "ok guarded" in output
    assert "Both tools ran." in output
    assert "last turn: 11 in · 7 out" in output
    assert "guarded" in app.approver.always
    stored = store.messages(app.recorder.session_id)
    assert authorless(stored) == [*sent, {"role": "assistant", "content": "Both tools ran."}]
    assert store.get(app.recorder.session_id).title == "use the tools"


async def test_denied_tool_gets_a_result(store: SessionStore, tools_dir: Path) -> None:
    script = [{"sse": tool_calls_sse(("call_g", "guarded", {"text": "x"}))}, {"sse": text_stream("OK, not run.")}]
    _, server, _ = await chat(script, "go\rn\r/exit\r", store, options=chat_options(tools_dirs=(str(tools_dir),)))
    tool_msg = server.requests[1]["messages"][2]
    assert tool_msg["tool_call_id"] == "call_g" and "the user declined guarded" in tool_msg["content"]


async def test_approval_policy_rules_apply_in_chat(store: SessionStore, tools_dir: Path) -> None:
    script = [{"sse": tool_calls_sse(("call_g", "guarded", {"text": "x"}))}, {"sse": text_stream("Refused.")}]
    settings = Settings(model="test-model", deny=("guarded",))  # deny rules hold even with --yes
    _, server, _ = await chat(script, "go\r/exit\r", store, settings=settings,  # nothing typed for a question
                              options=chat_options(tools_dirs=(str(tools_dir),), yes=True))
    tool_msg = server.requests[1]["messages"][2]
    assert "denied by the rule 'guarded'" in tool_msg["content"]


async def test_ctrl_c_in_the_middle_of_a_tool_leaves_a_valid_history(store: SessionStore, tools_dir: Path) -> None:
    script = [
        {"sse": tool_calls_sse(("call_q", "quick", {"text": "a"}), ("call_s", "slow", {"seconds": 3600}))},
        {"sse": text_stream("Fine, stopped.")},
    ]
    keys = "run the slow tool\rwhat happened?\r/exit\r"
    # the hour-long tool is cancelled, not waited for: `chat` bounds the whole conversation
    output, server, app = await chat(script, keys, store, options=chat_options(tools_dirs=(str(tools_dir),)))
    assert "interrupted" in output

    stored = store.messages(app.recorder.session_id)
    assert_valid(stored)
    assert stored[1]["tool_calls"][1]["id"] == "call_s"
    assert {m["tool_call_id"]: m["content"] for m in stored[2:4]} == {
        "call_q": "echo: a", "call_s": "Error: the tool call was cancelled by the user; no result."}
    # the next message goes out on the repaired history
    sent = server.requests[1]["messages"]
    assert_valid(sent)
    assert sent[-1] == {"role": "user", "content": "what happened?"}
    assert len(server.requests) == 2


async def test_ctrl_c_while_streaming_keeps_the_partial_answer(store: SessionStore) -> None:
    import os
    import signal

    words = "".join(f"word{i} " for i in range(2000))
    script = [{"sse": text_stream(words), "delay_ms": 150}, {"sse": text_stream("Short answer.")}]
    out = io.StringIO()

    def press_ctrl_c(server: ReplayServer) -> None:
        wait_for(lambda: "word0" in out.getvalue())  # part of the answer is shown; the rest takes a minute
        os.kill(os.getpid(), signal.SIGINT)

    with ReplayServer(script) as server, create_pipe_input() as pipe:
        pipe.send_text("talk a lot\ragain\r/exit\r")
        app = ChatApp(Settings(model="test-model", base_url=server.base_url), ChatOptions(),
                      console=Console(file=out, width=100), pt_input=pipe, pt_output=DummyOutput(), store=store)
        threading.Thread(target=press_ctrl_c, args=(server,), daemon=True).start()
        await asyncio.wait_for(app.run(), 120)  # bounds a hang
    stored = store.messages(app.recorder.session_id)
    assert [m["role"] for m in stored] == ["user", "assistant", "user", "assistant"]
    partial = stored[1]["content"]
    assert partial.startswith("word0") and partial.endswith("[interrupted by the user]")
    assert words.strip() not in partial
    assert server.requests[1]["messages"][1] == stored[1]


async def test_resume_latest_repairs_a_crashed_turn(store: SessionStore) -> None:
    info = store.create(model="test-model", cwd=str(Path.cwd()))  # --resume continues this folder's latest
    store.append(info.id, {"role": "user", "content": "list files"})
    store.append(info.id, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "list_directory", "arguments": "{}"}}]})
    # Enter at the list of sessions picks the first: this folder's latest
    _, server, _ = await chat([{"sse": text_stream("Sorry, try again?")}], "\rgo on\r/exit\r", store,
                              options=ChatOptions(resume=""))
    sent = server.requests[0]["messages"]
    assert_valid(sent)
    assert sent[2] == {"role": "tool", "tool_call_id": "call_1",
                       "content": "Error: the tool call was interrupted; no result."}
    assert authorless(store.messages(info.id)[2]) == sent[2]


async def test_a_resumed_session_keeps_its_stricter_modes_and_a_new_one_the_chats(
        store: SessionStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `crow chat --resume` of a session that ran read-only, under a looser config, ran its writes
    monkeypatch.chdir(tmp_path)
    info = store.create(model="test-model", cwd=str(Path.cwd()), approval="read-only", sandbox="read-only")
    store.append(info.id, {"role": "user", "content": "look"})
    store.append(info.id, {"role": "assistant", "content": "Looked."})
    store.release(info.id)
    script = [{"sse": tool_calls_sse(("call_w1", "write_file", {"path": "planted.txt", "content": "x"}))},
              {"sse": text_sse("Refused.")}]
    _, server, app = await chat(script, "write it\r/exit\r", store, options=ChatOptions(resume=info.id),
                                settings=Settings(model="test-model", api_key="sk-test", approval="yolo"))
    assert not (Path.cwd() / "planted.txt").exists()
    assert "read-only" in server.requests[1]["messages"][-1]["content"]
    assert app.approver.policy.mode == "read-only"
    app.fresh()  # /new: a new session runs under the chat's own modes
    assert app.approver.policy.mode == "yolo"


async def test_a_mode_changed_in_the_chat_is_recorded_and_told(store: SessionStore, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # the one call a change of mode makes (/approval, plan mode): the model is never told a mode it is not under
    from crow_cli.surfaces.persist import RunModes

    monkeypatch.chdir(tmp_path)
    _, _, app = await chat([{"sse": text_sse("Hi.")}], "hello\r/exit\r", store,
                           settings=Settings(model="test-model", api_key="sk-test", default_prompt=True))
    assert "approves each file change" in app.history[0]["content"]
    app.change_modes(RunModes("read-only", "read-only"))
    assert "are not read-only are refused" in app.history[0]["content"]
    assert "may write nowhere" in app.history[0]["content"]
    assert app.approver.policy.mode == "read-only"
    info = store.get(app.recorder.session_id)
    assert (info.approval, info.sandbox) == ("read-only", "read-only")


# A system file that cannot be read (`crow chat --system-file /nope.md`) is the only line: no welcome banner first
async def test_a_bad_system_file_is_the_only_line_before_the_chat_ends(store: SessionStore, tmp_path: Path) -> None:
    out = io.StringIO()
    app = ChatApp(Settings(model="test-model", api_key="sk-test", default_prompt=True,
                           system_prompt_file=str(tmp_path / "nope.md")),
                  ChatOptions(), console=Console(file=out, width=100), store=store)
    with pytest.raises(ConfigError, match="cannot be read"):
        await app.run()
    assert out.getvalue() == ""


async def test_a_rule_naming_no_tool_is_the_only_line_before_the_chat_ends(store: SessionStore) -> None:
    # `crow chat --allow run_shel:ls` printed the banner before its error: validated first
    out = io.StringIO()
    app = ChatApp(Settings(model="test-model", api_key="sk-test", allow=("run_shel:ls",)), ChatOptions(),
                  console=Console(file=out, width=100), store=store)
    with pytest.raises(ConfigError, match="run_shel"):
        await app.run()
    assert out.getvalue() == ""


async def test_an_empty_system_file_is_said_under_the_banner(store: SessionStore, tmp_path: Path) -> None:
    # an empty --system-file sent no system prompt without a word
    (tmp_path / "empty.md").write_text("")
    output, server, _ = await chat([{"sse": text_stream("Hi.")}], "hello\r/exit\r", store,
                                   settings=Settings(model="test-model", api_key="sk-test", default_prompt=True,
                                                     system_prompt_file=str(tmp_path / "empty.md")))
    assert f"crow: warning: the system prompt file '{tmp_path / 'empty.md'}' is empty" in output
    assert server.requests[0]["messages"][0]["role"] == "user"


async def test_ctrl_d_and_double_ctrl_c_leave(store: SessionStore) -> None:
    output, _, _ = await chat([], "\x04", store)  # Ctrl-D
    output, _, _ = await chat([], "\x03\x03", store)  # Ctrl-C twice
    assert "press Ctrl-C again" in output
    assert store.recent() == []  # nothing said, nothing stored


async def test_no_session_records_nothing(store: SessionStore) -> None:
    await chat([{"sse": text_stream("Hi.")}], "hello\r/exit\r", store, options=ChatOptions(session=False))
    assert store.recent() == []


async def test_a_path_is_a_message_not_a_command(store: SessionStore) -> None:
    _, server, _ = await chat([{"sse": text_stream("A file.")}], "/etc/hosts is what?\r/exit\r", store)
    assert server.requests[0]["messages"] == [{"role": "user", "content": "/etc/hosts is what?"}]


# A chat locks only the session it is in, never the others in the store
async def test_chat_holds_only_the_session_it_is_in(tmp_path: Path) -> None:

    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output import DummyOutput
    from rich.console import Console

    from crow_cli.config import Settings
    from crow_cli.surfaces.chat.app import ChatApp, ChatOptions

    db = tmp_path / "s.db"
    store = SessionStore(db)
    old = store.create(model="test-model")
    store.append(old.id, {"role": "user", "content": "before"})
    store.release()
    script = [{"sse": text_stream("one")}, {"sse": text_stream("two")}]
    with ReplayServer(script) as server, create_pipe_input() as pipe, SessionStore(db) as other:
        pipe.send_text(f"/resume {old.id}\rhello\r/new\rsecond\r/exit\r")
        app = ChatApp(replace(Settings(model="test-model", api_key="sk-test"), base_url=server.base_url),
                      ChatOptions(), console=Console(file=open(os.devnull, "w"), width=100),  # noqa: SIM115
                      pt_input=pipe, pt_output=DummyOutput(), store=store)
        assert await app.run() == 0
        new = app.recorder.session_id
        assert new and new != old.id
        with pytest.raises(SessionError, match="in use by another crow"):
            other.load(new)  # the chat is in it
        assert [m["content"] for m in other.load(old.id)] == ["before", "hello", "one"]  # /new let it go
    store.close()


# A chat that opened the session store itself (as `crow chat` does) frees its session and closes the store when it
# ends, as `crow run` (run_prompt) does: a caller in the same process can continue it
async def test_a_chat_that_opened_the_store_leaves_its_session_free_when_it_ends(tmp_path: Path) -> None:
    with ReplayServer([{"sse": text_stream("one")}]) as server, create_pipe_input() as pipe:
        pipe.send_text("hi\r/exit\r")
        app = ChatApp(Settings(model="test-model", api_key="sk-test", base_url=server.base_url), ChatOptions(),
                      console=Console(file=io.StringIO(), width=100), pt_input=pipe, pt_output=DummyOutput())
        assert await app.run() == 0
    assert app.recorder is not None and app.recorder.session_id is not None
    with SessionStore() as store:
        assert [m["content"] for m in store.load(app.recorder.session_id)] == ["hi", "one"]  # not "in use"


# The state folders crow creates are readable by their owner only
def test_state_folders_crow_creates_are_private(_isolated_home: Path) -> None:
    from crow_cli.surfaces.chat.terminal import _history_path  # noqa: PLC2701  # where the input history lives

    path = _history_path()
    assert path.exists() and _mode_of(path) == 0o600
    folder = path.parent
    while folder != _isolated_home:
        assert _mode_of(folder) == 0o700, folder  # none of these existed
        folder = folder.parent


def _mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_tab_completes_a_prompt_files_name_and_an_edit_is_used_at_once(tmp_path: Path) -> None:
    prompt = tmp_path / ".crow/prompts/greet.md"
    prompt.parent.mkdir(parents=True)
    prompt.write_text("Greet $ARGUMENTS.")
    script = [{"sse": text_stream("Hi.")}, {"sse": text_stream("Welcome.")}]
    with ReplayServer(script) as server, ChatTerminal(
            ["--base-url", server.base_url, "--api-key", "sk-test", "--model", "test-model", "--no-tools"],
            cwd=tmp_path) as term:
        term.expect("›")
        term.send("/gre\t")  # Tab: the prompt file's name (completed in the background)
        term.expect("/greet")
        term.send(" Ann\r")
        term.expect("Hi.")
        prompt.write_text("Welcome $ARGUMENTS.")  # read when used: no restart
        term.expect("›")
        term.send("/greet Bob\r")
        term.expect("Welcome.")
        term.expect("›")
        term.send("\x04")
        assert term.wait() == 0
    assert [r["messages"][-1]["content"] for r in server.requests] == ["Greet Ann.", "Welcome Bob."]


# @path mentions attach files in chat
async def test_at_mentions_attach_files(store: SessionStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "notes.txt").write_text("the milk")
    (tmp_path / "blob.bin").write_bytes(b"\0\1")
    monkeypatch.chdir(tmp_path)
    output, server, _ = await chat([{"sse": text_stream("ok")}], "see @blob.bin\rwhat about @notes.txt?\r/exit\r",
                                   store)
    assert "cannot attach blob.bin: a binary file" in output and "the message was not sent" in output
    assert len(server.requests) == 1
    sent = server.requests[0]["messages"][-1]["content"]
    assert sent == "what about @notes.txt?\n\n[attached file: notes.txt]\n```\nthe milk\n```"
    assert "attached: notes.txt" in output
    # the session is titled with what was typed, not with the attached file's text after it
    assert [s.title for s in store.recent()] == ["what about @notes.txt?"]


async def test_a_damaged_session_store_is_said_once_and_the_chat_goes_on(tmp_path: Path) -> None:
    # random bytes in sessions.db are said once ("this chat is not recorded") and the chat goes on, as `crow run`
    # carries on with a warning
    from crow_cli.sessions import default_db_path

    db = default_db_path()
    db.parent.mkdir(parents=True, exist_ok=True)
    db.write_bytes(bytes(range(256)) * 16)
    out = io.StringIO()
    with ReplayServer([{"sse": text_stream("Still here.")}]) as server, create_pipe_input() as pipe:
        pipe.send_text("hello\r/new\r/exit\r")
        app = ChatApp(Settings(model="test-model", api_key="sk-test", base_url=server.base_url), ChatOptions(),
                      console=Console(file=out, width=100), pt_input=pipe, pt_output=DummyOutput())
        assert await asyncio.wait_for(app.run(), 30) == 0
    output = out.getvalue()
    assert "Still here." in output and output.count("this chat is not recorded") == 1, output


async def test_a_non_utf8_byte_typed_is_cleaned_and_the_chat_goes_on(store: SessionStore) -> None:
    # a non-UTF-8 byte typed into `crow chat` is sent as U+FFFD, no internal error, and later messages go on
    script = [{"sse": text_stream("Got it.")}, {"sse": text_stream("Hello.")}]
    output, server, _ = await chat(script, b"caf\xe9 au lait\rhello\r/exit\r", store)
    assert "internal error" not in output and "Got it." in output and "Hello." in output
    assert server.requests[0]["messages"][-1] == {"role": "user", "content": "caf\ufffd au lait"}
    assert [m["content"] for m in server.requests[1]["messages"] if m["role"] == "user"] == \
        ["caf\ufffd au lait", "hello"]


# Held at `import openai` until the gate file exists; the file `started` says the import began.
SDK_GATE = '''
import os, sys, time

class _Gate:
    def find_spec(self, name, path=None, target=None):
        if name == "openai":
            sys.meta_path.remove(self)
            open(os.environ["CROW_TEST_SDK_STARTED"], "w").close()
            while not os.path.exists(os.environ["CROW_TEST_SDK_GATE"]):
                time.sleep(0.01)
        return None

sys.meta_path.insert(0, _Gate())
'''


def test_the_prompt_shows_while_the_sdk_loads_and_the_first_turn_waits_for_it(tmp_path: Path) -> None:
    # the SDK's import (~0.7 s) is paid while the user types: the prompt is up before it ends
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SDK_GATE)
    started, gate = tmp_path / "sdk-started", tmp_path / "sdk-gate"
    env = {"PYTHONPATH": str(hook), "CROW_TEST_SDK_STARTED": str(started), "CROW_TEST_SDK_GATE": str(gate)}
    with ReplayServer([{"sse": text_stream("Hello there.")}]) as server, ChatTerminal(
            ["--base-url", server.base_url, "--api-key", "sk-test", "--model", "test-model", "--no-tools"],
            cwd=tmp_path, env=env) as term:
        term.expect("›")  # up while `import openai` cannot finish
        wait_for(started.exists)  # ... and it began without a message sent
        term.send("hi\r")
        gate.touch()
        term.expect("Hello there.")
        term.expect("›")  # the next prompt is up: a Ctrl-D sent before it may reach the finishing turn
        term.send("\x04")
        assert term.wait() == 0
    assert len(server.requests) == 1


async def test_a_typed_escape_sequence_that_looks_like_a_mouse_event_is_no_internal_error(store: SessionStore) -> None:
    # ESC [ 3 1 m typed at the prompt (a colour code pasted where the terminal does not bracket pastes) is no
    # mouse event for prompt-toolkit's handler: no traceback, and the next line is the next message
    out, server, _app = await chat([{"sse": text_sse("Hello.")}], b"\x1b[31mhi\r/exit\r", store)
    assert [m["content"] for m in server.requests[0]["messages"] if m["role"] == "user"] == ["hi"]
    assert "Hello." in out


# Chat's prompt is up at once while a slow MCP server starts; a message sent before it is up waits for it
# (one line naming it) and then has its tools
def _slow_mcp_config(tmp_path: Path, gate: Path, started: Path) -> Path:
    """A config whose one MCP server (the stdlib fault server) starts only once `gate` exists."""
    server_py = Path(__file__).resolve().parents[2] / "tools" / "mcp_fault_server.py"
    wait = f'touch "{started}"; while [ ! -f "{gate}" ]; do sleep 0.02; done; exec "{sys.executable}" "{server_py}" ""'
    config = tmp_path / "config.toml"
    config.write_text(f"[mcp_servers.slow]\ncommand = \"sh\"\nargs = [\"-c\", {json.dumps(wait)}]\n")
    return config


def test_the_prompt_is_up_before_a_slow_mcp_server_has_started(tmp_path: Path) -> None:
    gate, started = tmp_path / "gate", tmp_path / "started"
    config = _slow_mcp_config(tmp_path, gate, started)
    with ReplayServer([{"sse": text_stream("Hello there.")}]) as server, ChatTerminal(
            ["--base-url", server.base_url, "--api-key", "sk-test", "--model", "test-model", "--config", str(config)],
            cwd=tmp_path) as term:
        term.expect("starting MCP servers: slow")
        term.expect("›")
        wait_for(started.exists)
        assert not gate.exists()  # the prompt is up while the server cannot have started
        term.send("hi\r")
        term.expect("waiting for MCP server slow to start")
        gate.touch()
        term.expect("Hello there.")
        term.expect("›")
        term.send("\x04")
        assert term.wait() == 0
    assert [t["function"]["name"] for t in server.requests[0]["tools"] if t["function"]["name"] == "echo"] == ["echo"]


# A server that comes up while the prompt waits says so above the prompt, and its tools are listed
def test_mcp_tools_join_while_the_prompt_waits(tmp_path: Path) -> None:
    gate, started = tmp_path / "gate", tmp_path / "started"
    config = _slow_mcp_config(tmp_path, gate, started)
    with ChatTerminal(["--base-url", "http://127.0.0.1:9/v1", "--api-key", "sk-test", "--model", "m",
                       "--config", str(config)], cwd=tmp_path) as term:
        term.expect("›")
        wait_for(started.exists)
        term.send("/tools\r")
        term.expect("MCP servers still starting: slow")
        term.expect("›")
        gate.touch()
        term.expect("MCP servers up: slow")
        term.send("/tools\r")
        term.expect("Echo text.")
        term.expect("›")  # Ctrl-D before the prompt is back is lost to the cooked terminal, and the chat waits on
        term.send("\x04")
        assert term.wait() == 0


NOTE = "I ran a command in the shell:\n$ "


async def test_a_typed_shell_command_goes_with_the_next_message(store: SessionStore, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the workspace the command runs in
    keys = "!echo hello > said.txt; cat said.txt\r!exit 3\rwhat did it print?\r/exit\r"
    output, server, app = await chat([{"sse": text_stream("It printed hello.")}], keys, store)
    assert (tmp_path / "said.txt").read_text() == "hello\n"  # it ran in the workspace, nobody asked
    assert "Allow run_shell" not in output
    assert 'run_shell(echo hello > said.txt; cat said.txt)\n' in output  # as typed: no time limit
    assert "ok run_shell" in output and "    hello" in output
    assert "error run_shell" in output and "exit code 3" in output  # a failing command: its exit status
    (request,) = server.requests  # nothing was sent before the message
    assert request["messages"] == [{"role": "user", "content": (
        f"{NOTE}echo hello > said.txt; cat said.txt\n[exit code 0]\nhello\n\n"
        f"{NOTE}exit 3\n[exit code 3] (no output)\n\nwhat did it print?")}]  # one user message: no two in a row
    stored = store.messages(app.recorder.session_id)
    assert authorless(stored) == [*request["messages"], {"role": "assistant", "content": "It printed hello."}]


async def test_a_typed_shell_command_is_kept_in_the_session_until_the_next_message(
        store: SessionStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    output, server, app = await chat([], "!echo kept\r/retry\r/exit\r", store)
    assert server.requests == []  # nothing is sent for a command, nor for /retry after it
    assert "the commands you ran go with your next message; send it instead of /retry" in output
    session = app.recorder.session_id
    assert store.messages(session) == [{"role": "user", "content": f"{NOTE}echo kept\n[exit code 0]\nkept"}]
    assert store.get(session).title == "!echo kept"  # what was typed, not the note the model reads
    _, server, app = await chat([{"sse": text_stream("Seen.")}], "and so?\r/exit\r", store,
                                options=ChatOptions(resume=session))
    assert server.requests[0]["messages"] == [
        {"role": "user", "content": f"{NOTE}echo kept\n[exit code 0]\nkept\n\nand so?"}]
    assert_valid(store.messages(session))


async def test_a_bang_without_a_command_or_a_denied_one_adds_nothing(store: SessionStore, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    settings = Settings(model="test-model", api_key="sk-test", deny=("run_shell:touch",))
    output, server, _ = await chat([{"sse": text_stream("Hi.")}], "!\r!   \r!touch made\rhello\r/exit\r", store,
                                   settings=settings)
    usage = "usage: !COMMAND runs COMMAND in the workspace's shell; its output goes with your next message"
    assert output.count(usage) == 2 and usage + "\n" + usage + "\n" in output  # one line each
    assert "denied run_shell" in output and not (tmp_path / "made").exists()  # deny rules hold for the person too
    # the status line says the refusal, not the advice meant for the model ("Do not retry it; …")
    assert "s · by the rule 'run_shell:touch'\n" in output and "Do not retry" not in output
    assert server.requests[0]["messages"] == [{"role": "user", "content": "hello"}]


@needs_sandbox()
async def test_a_typed_shell_command_runs_in_the_sandbox(store: SessionStore, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    for folder in ("ws", "tmp", "away"):
        (tmp_path / folder).mkdir()
    monkeypatch.chdir(tmp_path / "ws")
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))  # the sandbox's writable temp dir: not where `away` is
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    outside = tmp_path / "away" / "outside.txt"
    output, server, _ = await chat([{"sse": text_stream("OK.")}], f"!touch {outside}\rn\rwell?\r/exit\r", store)
    assert "outside the sandbox" in output  # the sandbox stopped it; running it unconfined is asked about
    assert not outside.exists()  # `n`: it stays stopped
    assert "denied run_shell" in output
    (user,) = [m for m in server.requests[0]["messages"] if m["role"] == "user"]
    assert user["content"].startswith(f"{NOTE}touch {outside}\n") and user["content"].endswith("\n\nwell?")


async def test_ctrl_c_at_the_approval_prompt_cancels_the_whole_turn(store: SessionStore,
                                                                   approval_tools: Path) -> None:
    script = [
        {"sse": tool_calls_sse(("call_n", "nap", {"seconds": 30}), ("call_g1", "guarded", {"text": "one"}),
                               ("call_g2", "guarded", {"text": "two"}))},
        {"sse": text_stream("Stopped, then.")},
    ]
    # Ctrl-C at the first approval prompt; the next line is a new message, not an answer to a prompt
    output, server, app = await chat(script, "go\r\x03what now?\r/exit\r", store,
                                     options=chat_options(tools_dirs=(str(approval_tools),)))
    assert "interrupted: unfinished tool calls were cancelled" in output
    assert output.count('{"text": "one"}') == 2  # its → line and its preview
    assert output.count('{"text": "two"}') == 1  # its → line only: the second call was never asked about

    stored = store.messages(app.recorder.session_id)
    assert_valid(stored)
    assert [(m["tool_call_id"], m["content"]) for m in stored[2:5]] == [
        ("call_n", CANCELLED), ("call_g1", CANCELLED), ("call_g2", CANCELLED)]
    assert len(server.requests) == 2  # the turn was not continued with the results
    assert server.requests[1]["messages"] == [*authorless(stored[:5]), {"role": "user", "content": "what now?"}]
    assert authorless(stored[5:]) == [{"role": "user", "content": "what now?"},
                                      {"role": "assistant", "content": "Stopped, then."}]


async def test_after_ctrl_c_at_the_approval_prompt_the_chat_prompt_behaves_as_after_a_stream(
        store: SessionStore, approval_tools: Path) -> None:
    script = [{"sse": tool_calls_sse(("call_g", "guarded", {"text": "x"}))}]
    # Ctrl-C at the approval prompt stops the turn; at the chat prompt, Ctrl-C twice leaves
    output, server, app = await chat(script, "go\r\x03\x03\x03", store,
                                     options=chat_options(tools_dirs=(str(approval_tools),)))
    assert output.count("press Ctrl-C again") == 1
    assert len(server.requests) == 1
    stored = store.messages(app.recorder.session_id)
    assert_valid(stored)
    assert stored[-1] == {"role": "tool", "tool_call_id": "call_g", "content": CANCELLED, "crow_outcome": "cancelled"}
    # and Ctrl-D leaves at once
    _, server, app = await chat(script, "go\r\x03\x04", store, options=chat_options(tools_dirs=(str(approval_tools),)))
    assert_valid(store.messages(app.recorder.session_id))


async def test_the_approval_prompt_previews_the_call_as_crow_run_does(store: SessionStore, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("one\ntwo\nthree\n")
    edit = {"path": "notes.txt", "old_string": "two", "new_string": "2"}
    shell = {"command": "ls -la && echo done"}
    script = [{"sse": tool_calls_sse(("call_e", "edit_file", edit), ("call_s", "run_shell", shell))},
              {"sse": text_stream("Left alone.")}]
    settings = Settings(model="test-model", workspace=str(work))
    output, _, _ = await chat(script, "edit it\rn\rn\r/exit\r", store, settings=settings)

    edit_tool = next(t for t in BUILTIN_TOOLS if t.name == "edit_file")
    edit_preview = describe_call(ToolCall("call_e", "edit_file", json.dumps(edit), 0), edit_tool,
                                 ToolContext.for_workspace(work))
    assert "-two\n+2\n" in edit_preview
    assert edit_preview in output  # the diff, line for line, as `crow run` shows it
    assert "$ ls -la && echo done" in output
    assert output.count('old_string="two"') == 1  # in its → line only: the question shows the diff, not the JSON
    assert (work / "notes.txt").read_text() == "one\ntwo\nthree\n"


@pytest.mark.parametrize("terminal", [False, True])
async def test_a_tool_line_never_lands_on_the_approval_prompt_line(store: SessionStore, approval_tools: Path,
                                                                   terminal: bool, tmp_path: Path) -> None:
    """`nap` finishes while the approval prompt for `guarded` waits: its ✓ line must not join the prompt."""
    rested = tmp_path / "rested"
    script = [{"sse": tool_calls_sse(("call_n", "nap", {"seconds": 0.1, "flag": str(rested)}),
                                     ("call_g", "guarded", {"text": "x"}))},
              {"sse": text_stream("Both done.")}]
    screen = io.StringIO()  # what the terminal shows: the chat's console and prompt-toolkit write to one stream

    def answer_late(pipe: object) -> None:
        wait_for(lambda: "Allow guarded" in screen.getvalue() and rested.exists())  # nap ended while it waits
        pipe.send_text("y\r/exit\r")  # type: ignore[attr-defined]

    with ReplayServer(script) as server, create_pipe_input() as pipe:
        pipe.send_text("go\r")
        console = Console(file=screen, width=100, force_terminal=terminal, color_system=None)
        app = ChatApp(Settings(model="test-model", base_url=server.base_url),
                      chat_options(tools_dirs=(str(approval_tools),)), console=console, pt_input=pipe,
                      pt_output=PlainTextOutput(screen), store=store)
        threading.Thread(target=answer_late, args=(pipe,), daemon=True).start()
        await asyncio.wait_for(app.run(), 120)  # bounds a hang
    text = screen.getvalue()
    lines = [line for raw in text.split("\n") for line in raw.split("\r")]
    mark = "✓ nap" if terminal else "ok nap"
    assert any(mark in line for line in lines), text
    assert not [line for line in lines if "Allow guarded" in line and mark in line], text
    # while the question waits nothing else is written: on a terminal it would land on the question's line
    asked = text.index("Allow guarded")
    answered = text.index(": y", asked)
    assert mark not in text[asked:answered] and "→" not in text[asked:answered], text
    assert text.index(mark) > answered  # the line comes once the question is answered
    assert server.requests[1]["messages"][3]["content"] == "guarded ran: x"


def test_the_preview_cannot_drive_the_terminal() -> None:
    """The model writes the command; its escape sequences must not reach either approval prompt."""
    shell = next(t for t in BUILTIN_TOOLS if t.name == "run_shell")
    shown = describe_call(ToolCall("c", "run_shell", json.dumps({"command": "ls\x1b[2J\x1b]0;owned\x07 -l"}), 0),
                          shell)
    assert shown == "$ ls\\u001b[2J\\u001b]0;owned\\u0007 -l"  # shown as escapes: what runs, never a control


# A scripted model that tries to escape gets nothing out of `crow chat --yes`: what the sandbox stops is a
# question (answered no here), and a key in a file never reaches the model
@needs_sandbox()
async def test_chat_yes_lets_no_escape_out(store: SessionStore, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    ws, temp, outside = tmp_path / "ws", tmp_path / "tmp", tmp_path / "outside"
    for folder in (ws / ".git/hooks", temp, outside):
        folder.mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # the sandbox's writable temp dir: not `outside`'s parent
    key = "sk-proj-real-openai-key-42"
    (ws / ".env").write_text(f"OPENAI_API_KEY={key}\n")
    calls = [("w", "run_shell", {"command": f"echo x > {outside}/f"}),
             ("h", "run_shell", {"command": "echo evil > .git/hooks/pre-commit"}),
             ("k", "read_file", {"path": ".env"})]
    script = [{"sse": tool_calls_sse(*calls)}, {"sse": text_stream("Nothing got out.")}]
    settings = Settings(model="test-model", api_key="sk-test", workspace=str(ws), secrets=(key,))
    output, server, _ = await chat(script, "go\rn\rn\r/exit\r", store, settings=settings,
                                   options=chat_options(yes=True))
    assert output.count("Run it once more OUTSIDE the sandbox") == 2
    assert list(outside.iterdir()) == [] and list((ws / ".git/hooks").iterdir()) == []
    sent = json.dumps(server.requests[1])
    assert key not in sent and "[REDACTED]" in sent and sent.count("Read-only file system") >= 2


async def test_always_for_a_command_prefix_and_no_with_a_reason(store: SessionStore, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    script = [{"sse": tool_calls_sse(("call_1", "run_shell", {"command": "pytest -q"}))},
              {"sse": tool_calls_sse(("call_2", "run_shell", {"command": "pytest -k x"}),
                                     ("call_3", "run_shell", {"command": "pytest; rm x"}))},
              {"sse": tool_calls_sse(("call_4", "run_shell", {"command": "ls"}))},
              {"sse": text_stream("I will run the tests first.")}]
    settings = Settings(model="test-model", workspace=str(work), sandbox="off")
    # `a` at the first question is "always for `pytest …`"; the later pytest call is not asked about, the line
    # that also runs rm is, and so is ls, answered no with what the model should do instead
    keys = "test it\ra\rn\rnope\rn run the tests first\r/exit\r"  # nope is no answer: asked again
    output, server, _ = await chat(script, keys, store, settings=settings)
    asked = [line for line in output.splitlines() if line.startswith("$ ")]  # each question's preview
    assert asked == ["$ pytest -q", "$ pytest; rm x", "$ ls"]
    results = {m["tool_call_id"]: m["content"] for m in server.requests[3]["messages"] if m["role"] == "tool"}
    assert list(results) == ["call_1", "call_2", "call_3", "call_4"]
    assert "declined" not in results["call_2"]  # it ran
    assert "the user declined run_shell" in results["call_3"]
    assert results["call_4"] == "Error: The user denied this call: run the tests first (run_shell was not run)"


def chat_args(base_url: str, tools_dir: Path) -> list[str]:
    return ["--base-url", base_url, "--api-key", "sk-test", "--model", "test-model", "--tools-dir", str(tools_dir)]


def stored_session() -> list[dict]:
    with SessionStore() as store:
        (info,) = store.recent()
        return store.messages(info.id)


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_signal_during_a_turn_saves_a_valid_session(tmp_path: Path, approval_tools: Path, sig: int,
                                                      code: int) -> None:
    script = [{"sse": tool_calls_sse(("call_q", "nap", {"seconds": 0}), ("call_s", "nap", {"seconds": 60}))},
              {"sse": text_stream("never sent")}]
    with ReplayServer(script) as server, ChatTerminal(chat_args(server.base_url, approval_tools), cwd=tmp_path) as term:
        term.expect("›")
        term.send("take a nap\r")
        term.expect('nap({"seconds": 60})')  # its spinner: the long nap runs
        if sig == signal.SIGHUP:
            term.hang_up()  # the terminal window was closed (SIGHUP, then the terminal goes once crow ended)
        else:
            term.signal(sig)
        assert term.wait() == code
        err = term.stderr()
    assert "Traceback" not in err and "Exception" not in err, err
    stored = stored_session()
    assert_valid(stored)
    assert [(m["tool_call_id"], m["content"]) for m in stored[2:]] == [("call_q", "rested"), ("call_s", CANCELLED)]
    assert len(server.requests) == 1


def test_closing_the_terminal_at_an_approval_question_saves_a_valid_session(tmp_path: Path,
                                                                            approval_tools: Path) -> None:
    script = [{"sse": tool_calls_sse(("call_n", "nap", {"seconds": 0}), ("call_g", "guarded", {"text": "x"}))},
              {"sse": text_stream("never sent")}]
    with ReplayServer(script) as server, \
            ChatTerminal(chat_args(server.base_url, approval_tools), cwd=tmp_path) as term:
        term.expect("›")
        term.send("go\r")
        term.expect("Allow guarded")
        term.hang_up(closed_once_shown='nap({"seconds": 0})')  # the question is gone: crow is closing the turn
        assert term.wait() == 129
        err = term.stderr()
    assert err == "crow: interrupted (SIGHUP)\n", err
    stored = stored_session()
    assert_valid(stored)
    assert stored[-1] == {"role": "tool", "tool_call_id": "call_g", "content": CANCELLED, "crow_outcome": "cancelled"}
    assert len(server.requests) == 1


def test_sigterm_at_the_prompt_exits_143(tmp_path: Path, approval_tools: Path) -> None:
    with ReplayServer([{"sse": text_stream("Hello there.")}]) as server, \
            ChatTerminal(chat_args(server.base_url, approval_tools), cwd=tmp_path) as term:
        term.expect("›")
        term.send("hi\r")
        term.expect("Hello there.")
        term.expect("›")
        term.signal(signal.SIGTERM)
        assert term.wait() == 143
        err = term.stderr()
    assert "Traceback" not in err, err
    assert authorless(stored_session()) == [{"role": "user", "content": "hi"},
                                            {"role": "assistant", "content": "Hello there."}]


def test_ctrl_c_at_an_approval_prompt_on_a_terminal_stops_the_turn(tmp_path: Path, approval_tools: Path) -> None:
    script = [{"sse": tool_calls_sse(("call_g1", "guarded", {"text": "one"}), ("call_g2", "guarded", {"text": "two"}))},
              {"sse": text_stream("Fine.")}]
    with ReplayServer(script) as server, ChatTerminal(chat_args(server.base_url, approval_tools), cwd=tmp_path) as term:
        term.expect("›")
        term.send("go\r")
        term.expect("Allow guarded")
        term.send("\x03")  # Ctrl-C: the terminal is in raw mode, so it arrives as a key
        term.expect("interrupted")
        term.expect("›")
        term.send("and now?\r")
        term.expect("Fine.")
        term.expect("›")
        term.send("\x04")  # Ctrl-D leaves
        assert term.wait() == 0
        screen = term.screen()
        err = term.stderr()
    assert "Traceback" not in err, err
    assert screen.count("Allow guarded") >= 1 and "two" not in screen.split("interrupted")[0].split("Allow")[-1]
    stored = stored_session()
    assert_valid(stored)
    assert [(m["tool_call_id"], m["content"]) for m in stored[2:4]] == [("call_g1", CANCELLED), ("call_g2", CANCELLED)]
    assert server.requests[1]["messages"][-1] == {"role": "user", "content": "and now?"}
    assert len(server.requests) == 2


def test_a_tool_line_does_not_join_the_approval_question_on_a_terminal(tmp_path: Path, approval_tools: Path) -> None:
    rested = tmp_path / "rested"
    script = [{"sse": tool_calls_sse(("call_n", "nap", {"seconds": 0.1, "flag": str(rested)}),
                                     ("call_g", "guarded", {"text": "x"}))},
              {"sse": text_stream("Both done.")}]
    with ReplayServer(script) as server, ChatTerminal(chat_args(server.base_url, approval_tools), cwd=tmp_path) as term:
        term.expect("›")
        term.send("go\r")
        term.expect("Allow guarded")
        wait_for(rested.exists)  # nap ends while the question waits
        term.send("y\r")
        term.expect("Both done.")
        term.expect("›")
        term.send("\x04")
        assert term.wait() == 0
        screen = term.screen()
    assert "✓ nap" in screen
    joined = [line for line in screen.splitlines() if "Allow guarded" in line and ("✓" in line or "⠋" in line)]
    assert not joined, screen


def test_closing_the_terminal_while_an_answer_streams_exits_129(tmp_path: Path, approval_tools: Path) -> None:
    # the live display's cleanup after the terminal closed is no internal error (OSError: [Errno 5]): exit 129
    # "Title" shows with the first event; the next comes a minute later: the answer is still streaming when
    # the terminal goes, whatever the load (it was 2 s between 5-character events, "Title" in the second)
    answer = sse(chunk({"content": "# Title\n\n"}), chunk({"content": "A long answer"}),
                 chunk({"content": " that keeps streaming"}), chunk({}, "stop"))
    script = [{"sse": answer, "delay_ms": 60_000}]
    with ReplayServer(script) as server, ChatTerminal(chat_args(server.base_url, approval_tools), cwd=tmp_path) as term:
        term.expect("›")
        term.send("go\r")
        term.expect("Title")
        term.close_terminal()  # as a closed window does: the terminal goes, then SIGHUP (crow may see either first)
        term.signal(signal.SIGHUP)
        assert term.wait() == 129
        err = term.stderr()
    assert "error" not in err and "Traceback" not in err, err
    stored = stored_session()
    assert_valid(stored)
    assert stored[-1]["role"] == "assistant" and stored[-1]["content"].endswith("[interrupted by the user]")


def test_a_terminal_that_goes_away_without_sighup_ends_the_chat_with_129(tmp_path: Path, approval_tools: Path) -> None:
    # the first write to the closed terminal that fails (EIO, with no SIGHUP or before it) ends the turn and the
    # chat as a hang-up would: exit 129
    script = [{"sse": text_sse("# Title\n\nA long answer that keeps streaming"), "delay_ms": 300}]
    with ReplayServer(script) as server, ChatTerminal(chat_args(server.base_url, approval_tools), cwd=tmp_path) as term:
        term.expect("›")
        term.send("go\r")
        term.expect("Title")
        term.close_terminal()
        assert term.wait() == 129
        err = term.stderr()
    assert "error" not in err and "Traceback" not in err, err
    stored = stored_session()
    assert_valid(stored)
    assert stored[-1]["role"] == "assistant"  # the whole answer, or what came before the failed write


def test_ctrl_c_stops_a_typed_shell_command_and_the_chat_goes_on(tmp_path: Path, approval_tools: Path) -> None:
    script = [{"sse": text_stream("Still here.")}]
    with ReplayServer(script) as server, ChatTerminal(chat_args(server.base_url, approval_tools), cwd=tmp_path) as term:
        term.expect("›")
        term.send("!touch started; sleep 60; touch finished\r")
        wait_for((tmp_path / "started").exists)  # the command runs
        term.signal(signal.SIGINT)  # Ctrl-C as the terminal sends it while a command runs (the chat reads no key)
        term.expect("interrupted: the command was stopped")
        term.expect("›")
        term.send("still there?\r")
        term.expect("Still here.")
        term.expect("›")
        term.send("\x04")
        assert term.wait() == 0
        err = term.stderr()
    assert "Traceback" not in err, err
    assert not (tmp_path / "finished").exists()
    assert server.requests[0]["messages"] == [{"role": "user", "content": "still there?"}]  # nothing was added


# `crow chat` in the home folder (where a command could write ~/.local/bin) says so and asks whether to go on:
# no (or Enter) ends it before anything is sent.
@pytest.mark.parametrize("reply", ["n", "", "y"])
async def test_a_chat_in_the_home_folder_asks_whether_to_go_on(store: SessionStore, _isolated_home: Path,
                                                               reply: str) -> None:
    settings = Settings(model="test-model", api_key="sk-test", workspace=str(_isolated_home),
                        sandbox=os.environ.get("CROW_SANDBOX", "workspace-write"))  # type: ignore[arg-type]
    output, server, _app = await chat([{"sse": text_stream("Hello!")}], f"{reply}\rhi\r\x04", store,
                                      settings=settings)
    assert "is your home folder" in output  # the question itself is prompt-toolkit's (on the terminal)
    if reply == "y":
        assert "Hello!" in output and len(server.requests) == 1
    else:
        assert "not started in the home folder" in output and server.requests == []


# the todo list and plans in chat

TODOS = [{"content": "read the code", "status": "completed"}, {"content": "fix the bug", "status": "in_progress"},
         {"content": "run the tests", "status": "pending"}]
PLAN = "# Plan\n\n1. Write `a.txt`"


async def test_todo_write_shows_a_checklist_and_a_resumed_chat_shows_the_list(store: SessionStore,
                                                                            tmp_path: Path) -> None:
    script = [{"sse": tool_calls_sse(("call_t", "todo_write", {"todos": TODOS}))}, {"sse": text_stream("On it.")}]
    output, _, _ = await chat(script, "fix it\r/exit\r", store)
    assert "[x] read the code\n    [~] fix the bug\n    [ ] run the tests" in output
    output, _, _ = await chat([], "\r/exit\r", store, options=ChatOptions(resume=""))  # Enter: the latest
    shown = output.split("resumed session", 1)[1]
    assert "todo list:" in shown and "[~] fix the bug" in shown and "[ ] run the tests" in shown


def _plan_then_write() -> list[dict]:
    return [{"sse": tool_calls_sse(("call_p", "exit_plan_mode", {"plan": PLAN}))},
            {"sse": tool_calls_sse(("call_w", "write_file", {"path": "a.txt", "content": "done"}))},
            {"sse": text_stream("Wrote it.")}]


async def test_an_approved_plan_goes_on_in_auto_edit_and_the_model_reads_so(store: SessionStore, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    settings = Settings(model="test-model", api_key="sk-test", sandbox="off", approval="plan")
    output, server, app = await chat(_plan_then_write(), "plan a file\ra\r/exit\r", store, settings=settings)
    assert "The plan:**\n\n# Plan\n\n1. Write `a.txt`" in output and "Allow write_file" not in output
    assert (tmp_path / "a.txt").read_text() == "done" and app.approver.policy.mode == "auto-edit"
    after = server.requests[1]["messages"]
    assert after[-2]["content"].startswith("The user approved the plan; the approval mode is now auto-edit")
    assert after[-1] == {"role": "user", "content": "[crow: the approval mode is now auto-edit: file changes in the "
                         "workspace apply without asking; commands are approved by the user]"}


async def test_keep_planning_sends_the_note_and_stays_in_plan_mode(store: SessionStore, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    settings = Settings(model="test-model", api_key="sk-test", sandbox="off", approval="plan")
    _, server, app = await chat(_plan_then_write(), "plan a file\rn name it b.txt\r/exit\r", store,
                                settings=settings)
    assert app.approver.policy.mode == "plan" and not (tmp_path / "a.txt").exists()
    kept = server.requests[1]["messages"][-1]
    assert kept["role"] == "tool" and kept["content"].startswith(
        "Error: The user read the plan and wants you to keep planning: name it b.txt.")
    assert "the session is planning" in server.requests[2]["messages"][-1]["content"]  # the write, refused


def test_a_reply_to_the_plan_that_is_no_answer_is_said_before_the_question_again(tmp_path: Path) -> None:
    """The hint follows the reply it is about and comes before the question is asked again (as an approval
    question's does), not held back until the plan is answered."""
    from crow_cli.surfaces.approve import PLAN_HINT

    with ReplayServer(_plan_then_write()) as server, ChatTerminal(
            ["--base-url", server.base_url, "--api-key", "sk-test", "--model", "test-model", "--approval", "plan",
             "--sandbox", "off"], cwd=tmp_path) as term:
        term.expect("›")
        term.send("plan a file\r")
        term.expect("Approve the plan?")
        term.send("maybe\r")
        term.expect(PLAN_HINT)  # before any answer: it was held back until the plan was answered
        term.expect("Approve the plan?")  # asked again
        term.send("a\r")
        term.expect("Wrote it.")
        term.expect("›")
        term.send("\x04")
        assert term.wait() == 0
    assert (tmp_path / "a.txt").read_text() == "done"


# `crow "PROMPT"` and `crow chat "PROMPT"` on a terminal open a chat and send PROMPT first; leaving says how to
# come back
def test_crow_with_a_prompt_on_a_terminal_opens_chat_and_sends_it(tmp_path: Path) -> None:
    with ReplayServer([{"sse": text_stream("Fixed it.")}]) as server, ChatTerminal(
            ["--base-url", server.base_url, "--api-key", "sk-test", "--model", "test-model", "--no-tools"],
            cwd=tmp_path, command="fix the test") as term:
        term.expect("Fixed it.")
        term.expect("›")
        term.send("\x04")
        term.expect("to continue this session: crow chat --resume ")
        assert term.wait() == 0
        screen = term.screen()
    assert [m["content"] for m in server.requests[0]["messages"] if m["role"] == "user"] == ["fix the test"]
    with SessionStore() as store:
        (info,) = store.recent()
    assert screen.count("crow chat --resume") == 1
    assert f"crow chat --resume {info.id}" in screen


def test_crow_with_only_options_on_a_terminal_opens_chat(tmp_path: Path) -> None:
    with ChatTerminal(["http://127.0.0.1:9/v1", "--api-key", "sk-test", "--model", "m", "--no-tools"],
                      cwd=tmp_path, command="--base-url") as term:  # `crow --base-url URL ...`
        term.expect("crow chat · m")
        term.expect("›")
        term.send("\x04")
        assert term.wait() == 0
        assert "--resume" not in term.screen()  # nothing was stored: nothing to come back to


async def test_chat_sends_its_first_message_then_reads_the_prompt(store: SessionStore) -> None:
    script = [{"sse": text_sse("One.")}, {"sse": text_sse("Two.")}]
    out, server, app = await chat(script, "again\r/exit\r", store, options=chat_options(first="fix the test"))
    assert [[m["content"] for m in r["messages"] if m["role"] == "user"][-1] for r in server.requests] == [
        "fix the test", "again"]
    assert app.recorder is not None and app.recorder.session_id is not None
    assert out.count("to continue this session: crow chat --resume") == 1
    assert out.rstrip().endswith(f"crow chat --resume {app.recorder.session_id}")


# `crow probe --tools` stored that the model makes no call crow can run: the chat says so once, as it opens
def test_a_chat_on_a_model_probed_without_tool_calls_says_so_once_at_start(tmp_path: Path) -> None:
    from crow_cli.wire import facts

    with ReplayServer([{"sse": text_stream("Hello there.")}]) as server:
        assert facts.learn(server.base_url, "test-model",
                           tool_probe={"one": "none", "typed": "none", "two": "none"}) is None
        with ChatTerminal(["--base-url", server.base_url, "--api-key", "sk-test", "--model", "test-model"],
                          cwd=tmp_path) as term:
            term.expect("makes no tool call crow can run")
            term.expect("›")
            term.send("hi\r")
            term.expect("Hello there.")
            term.expect("›")
            term.send("\x04")
            assert term.wait() == 0
            screen = term.screen()
    assert screen.count("crow probe --tools found that test-model makes no tool call") == 1, screen
