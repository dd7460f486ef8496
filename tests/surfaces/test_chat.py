"""`crow chat` driven in-process: prompt-toolkit pipe input, DummyOutput, a replay server on a real socket."""

from __future__ import annotations

import asyncio
import io
import json
import os
import stat
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput
from rich.console import Console

from crow_cli.config import Settings
from crow_cli.errors import ConfigError, SessionError
from crow_cli.export import exports_dir
from crow_cli.sessions import SessionStore
from crow_cli.surfaces.chat.app import ChatApp, ChatOptions
from crow_cli.surfaces.chat.commands import COMMANDS, help_text
from tests.replay_server import ReplayServer, text_stream
from tests.support import (
    ChatTerminal,
    assert_valid,
    authorless,
    chat,
    chat_options,
    crow,
    needs_sandbox,
    script,
    text_sse,
    tool_calls_sse,
    tools_folder,
    wait_for,
)

SLOW_TOOLS = '''
import asyncio, os, signal
from crow_cli.tools import tool

QUICK_DONE = asyncio.Event()  # the other call has its result: an event, not a time margin

@tool
async def slow(seconds: float = 30) -> str:
    """Press Ctrl-C (a real SIGINT to this process) once the quick call is done, then sleep.

    Args:
        seconds: how long to sleep.
    """
    await QUICK_DONE.wait()
    QUICK_DONE.clear()
    for _ in range(10):  # let the run take the quick result in (loop steps, not seconds)
        await asyncio.sleep(0)
    os.kill(os.getpid(), signal.SIGINT)
    await asyncio.sleep(seconds)
    return "finished"

@tool
async def quick(text: str) -> str:
    """Echo text.

    Args:
        text: what to echo.
    """
    QUICK_DONE.set()
    return "echo: " + text

@tool(needs_approval=True)
def guarded(text: str) -> str:
    """Needs approval.

    Args:
        text: anything.
    """
    return "guarded ran: " + text
'''


@pytest.fixture
def tools_dir(tmp_path: Path) -> Path:
    return tools_folder(tmp_path / "testtools", SLOW_TOOLS)


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


async def test_resume_continues_a_stored_session(store: SessionStore) -> None:
    old = store.create(model="test-model", base_url="http://x/v1", cwd="/tmp")
    for m in ({"role": "user", "content": "remember ZEBRA-42"}, {"role": "assistant", "content": "Noted: ZEBRA-42."}):
        store.append(old.id, m)
    other = store.create(model="test-model")
    store.append(other.id, {"role": "user", "content": "unrelated"})

    output, server, app = await chat([{"sse": text_stream("It was ZEBRA-42.")}],
                                     f"/resume {old.id[:4]}\rwhat was it?\r/exit\r", store)
    assert f"resumed session {old.id}" in output
    assert "Noted: ZEBRA-42." in output  # the last exchange is shown again
    assert server.requests[0]["messages"] == [
        {"role": "user", "content": "remember ZEBRA-42"}, {"role": "assistant", "content": "Noted: ZEBRA-42."},
        {"role": "user", "content": "what was it?"}]
    assert app.recorder.session_id == old.id
    assert len(store.messages(old.id)) == 4


async def test_fork_goes_on_in_a_copy_and_the_original_keeps_its_messages(store: SessionStore) -> None:
    script = [{"sse": text_stream("Noted: ZEBRA-42.")}, {"sse": text_stream("It was ZEBRA-42.")}]
    output, server, app = await chat(script, "remember ZEBRA-42\r/fork\rwhat was it?\r/exit\r", store)
    fork = store.get(app.recorder.session_id)
    (original,) = [s for s in store.recent() if s.id != fork.id]
    assert f"forked {original.id} → {fork.id}; /resume {original.id} goes back" in output
    assert server.requests[1]["messages"] == [
        {"role": "user", "content": "remember ZEBRA-42"}, {"role": "assistant", "content": "Noted: ZEBRA-42."},
        {"role": "user", "content": "what was it?"}]
    assert original.messages == 2 and len(store.messages(original.id)) == 2
    assert fork.title == "remember ZEBRA-42 (fork)"
    assert [m["content"] for m in store.messages(fork.id)] == ["remember ZEBRA-42", "Noted: ZEBRA-42.",
                                                               "what was it?", "It was ZEBRA-42."]
    with SessionStore(store.path) as other:  # the chat holds only the fork now: the original can go on elsewhere
        assert len(other.load(original.id)) == 2
        with pytest.raises(SessionError, match="in use"):
            other.load(fork.id)
    assert "/fork" in help_text()


async def test_a_fork_of_a_compacted_session_starts_its_requests_from_the_checkpoint(store: SessionStore) -> None:
    old = store.create(model="test-model")
    for m in ({"role": "user", "content": "long talk"}, {"role": "assistant", "content": "Long answer."},
              {"role": "user", "content": "more"}, {"role": "assistant", "content": "More."}):
        store.append(old.id, m)
    summary = [{"role": "user", "content": "[summary] we talked at length"}, {"role": "assistant", "content": "Ok."}]
    store.add_checkpoint(old.id, 2, summary, 900, 90, "we talked at length")
    _, server, _ = await chat([{"sse": text_stream("Next.")}], f"/resume {old.id}\r/fork\rnext\r/exit\r", store)
    assert server.requests[0]["messages"] == [*summary, {"role": "user", "content": "more"},
                                              {"role": "assistant", "content": "More."},
                                              {"role": "user", "content": "next"}]


async def test_fork_with_nothing_stored_says_why_and_forks_nothing(store: SessionStore) -> None:
    output, _, app = await chat([], "/fork\r/fork now\r/exit\r", store)
    assert "nothing to fork yet (no message of this chat is stored)" in output
    assert "crow: error: /fork takes no argument" in output  # found by a new-user tester (wave 5): it was ignored
    assert store.recent() == [] and app.recorder.info is None  # no empty session left behind either
    output, _, _ = await chat([{"sse": text_stream("Hi.")}], "hello\r/fork\r/exit\r", store,
                              options=ChatOptions(session=False))
    assert "--no-session: nothing is stored, so there is no session to fork" in output
    assert store.recent() == []


async def test_resume_and_retry_show_the_text_of_a_message_with_an_image_not_its_parts(store: SessionStore) -> None:
    # found typing the history: content may be a list of parts: resuming showed the parts' repr,
    # the image's whole data: URL with it (issue 18)
    old = store.create(model="test-model", cwd="/tmp")
    store.append(old.id, {"role": "user", "content": [
        {"type": "text", "text": "what is in it?\n\n[attached image: cat.png]"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]})
    store.append(old.id, {"role": "assistant", "content": "A cat."})
    store.release()
    output, server, _ = await chat([{"sse": text_stream("A tabby cat.")}], "/retry\r/exit\r", store,
                                   options=ChatOptions(resume=old.id))
    assert " ".join(output.split()).count("› what is in it? [attached image: cat.png]") == 2  # resumed, retried
    assert "base64" not in output and "image_url" not in output and "A cat." in output and "A tabby cat." in output
    assert server.requests[0]["messages"][0]["content"][1]["image_url"]["url"] == "data:image/png;base64,iVBORw0KGgo="


async def test_resume_names_an_attached_image_by_its_file(store: SessionStore) -> None:
    # the resumed last exchange said `[image: image/png, 8 B]`: the attached file's name was not kept
    old = store.create(model="test-model", cwd="/tmp")
    part = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    store.append(old.id, {"role": "user", "content": [{"type": "text", "text": "what is in it?"},
                                                      {**part, "crow_image": {"name": "cat.png"}}]})
    store.append(old.id, {"role": "assistant", "content": "A cat."})
    store.release()
    output, server, _ = await chat([{"sse": text_stream("Still a cat.")}], "and now?\r/exit\r", store,
                                   options=ChatOptions(resume=old.id))
    assert "› what is in it? [image: cat.png, 8 B]" in " ".join(output.split())
    assert server.requests[0]["messages"][0]["content"][1] == part  # the name is crow's: never sent


async def test_resume_refuses_a_system_prompt_it_would_not_use(store: SessionStore) -> None:
    # found trying `--system` on continued sessions as a new user: `crow run -c --system NEW` is refused, `crow chat
    # --resume --system NEW` went on with the session's own system prompt without a word
    old = store.create(model="test-model", cwd="/tmp")
    for m in ({"role": "system", "content": "OLD"}, {"role": "user", "content": "hi"},
              {"role": "assistant", "content": "Hello."}):
        store.append(old.id, m)
    store.release()
    with pytest.raises(ConfigError, match="--system cannot change the system prompt"):
        await chat([], "/exit\r", store, options=ChatOptions(resume=old.id, system="NEW"))
    assert len(store.messages(old.id)) == 3
    store.release()
    _, server, _ = await chat([{"sse": text_stream("Again.")}], "again\r/exit\r", store,
                              options=ChatOptions(resume=old.id, system="OLD"))
    assert server.requests[0]["messages"][0] == {"role": "system", "content": "OLD"}


async def test_no_session_resume_reads_the_session_and_writes_nothing_to_it(store: SessionStore) -> None:
    # `crow chat --no-session --resume ID` set the session's model and gave the compactor
    # the session's recorder, so a compaction stored its checkpoint (issue 18)
    old = store.create(model="old-model", base_url="http://x/v1", cwd="/tmp")
    for m in ({"role": "user", "content": "remember ZEBRA-42"}, {"role": "assistant", "content": "Noted: ZEBRA-42."}):
        store.append(old.id, m)
    script = [{"sse": text_stream("It was ZEBRA-42.")}, {"sse": text_stream("Summary: ZEBRA-42.")}]
    output, server, app = await chat(script, "what was it?\r/compact\r/exit\r", store,
                                     options=ChatOptions(session=False, resume=old.id))
    assert f"resumed session {old.id}" in output and app.recorder is None
    assert server.requests[0]["messages"][-1] == {"role": "user", "content": "what was it?"}
    assert (store.get(old.id).model, store.get(old.id).base_url) == ("old-model", "http://x/v1")
    assert len(store.messages(old.id)) == 2 and store.checkpoints(old.id) == []


# With --no-session, /resume loaded a session but recorded nothing, and /undo then found nothing,
# without a word why (issue 32)
async def test_no_session_resume_says_nothing_new_is_stored_and_undo_says_why(store: SessionStore) -> None:
    old = store.create(model="m", base_url="http://x/v1", cwd="/tmp")
    for m in ({"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello."}):
        store.append(old.id, m)
    output, _, _ = await chat([], "/undo\r/exit\r", store, options=ChatOptions(session=False, resume=old.id))
    assert "--no-session: this session is read, but nothing new is stored in it" in output
    assert "--no-session records nothing, so there is nothing to undo" in output


async def test_no_session_resume_of_a_crashed_turn_closes_it_in_memory_only(store: SessionStore) -> None:
    # `--no-session --resume ID` stored the "interrupted" results that close a cut turn (issue 18)
    old = store.create(model="test-model", cwd="/tmp")
    store.append(old.id, {"role": "user", "content": "list files"})
    store.append(old.id, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "list_directory", "arguments": "{}"}}]})
    store.release()  # as a crashed process leaves it
    _, server, app = await chat([{"sse": text_stream("Sorry, try again?")}], "go on\r/exit\r", store,
                                options=ChatOptions(session=False, resume=old.id))
    assert app.recorder is None
    assert server.requests[0]["messages"][2] == {"role": "tool", "tool_call_id": "call_1",
                                                 "content": "Error: the tool call was interrupted; no result."}
    assert len(store.messages(old.id)) == 2


async def test_resume_latest_repairs_a_crashed_turn(store: SessionStore) -> None:
    info = store.create(model="test-model", cwd=str(Path.cwd()))  # --resume continues this folder's latest
    store.append(info.id, {"role": "user", "content": "list files"})
    store.append(info.id, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "list_directory", "arguments": "{}"}}]})
    _, server, _ = await chat([{"sse": text_stream("Sorry, try again?")}], "go on\r/exit\r", store,
                              options=ChatOptions(resume=""))
    sent = server.requests[0]["messages"]
    assert_valid(sent)
    assert sent[2] == {"role": "tool", "tool_call_id": "call_1",
                       "content": "Error: the tool call was interrupted; no result."}
    assert authorless(store.messages(info.id)[2]) == sent[2]


def test_help_is_made_from_the_command_table() -> None:
    # The hand-kept help missed /quit; now /help and the dispatch come from one table (issue 18)
    lines = help_text().splitlines()
    assert len(lines) == 2 + len(COMMANDS) and lines[0].startswith("Enter sends")
    for line, command in zip(lines[1:], COMMANDS, strict=False):
        assert line.startswith(f"/{command.name}") and line.endswith(command.doc)
    assert "/exit, /quit" in help_text()
    assert lines[-1].startswith("!COMMAND ") and "with your next message" in lines[-1]


# found by a new-user tester (wave 4): `crow chat --system-file /nope.md` printed the welcome banner, then the error
async def test_a_bad_system_file_is_the_only_line_before_the_chat_ends(store: SessionStore, tmp_path: Path) -> None:
    out = io.StringIO()
    app = ChatApp(Settings(model="test-model", api_key="sk-test", default_prompt=True,
                           system_prompt_file=str(tmp_path / "nope.md")),
                  ChatOptions(), console=Console(file=out, width=100), store=store)
    with pytest.raises(ConfigError, match="cannot be read"):
        await app.run()
    assert out.getvalue() == ""


async def test_quit_leaves(store: SessionStore) -> None:
    output, server, _ = await chat([], "/quit\r", store)
    assert "unknown command" not in output and server.requests == []


# issue: a new user typed /clear (Claude Code's and goose's word for a fresh conversation) and got "unknown command"
async def test_clear_starts_a_new_session(store: SessionStore) -> None:
    script = [{"sse": text_stream("One.")}, {"sse": text_stream("Two.")}]
    output, server, _ = await chat(script, "hello\r/clear\rfresh start\r/exit\r", store)
    assert "unknown command" not in output
    assert server.requests[1]["messages"] == [{"role": "user", "content": "fresh start"}]
    assert "/new, /clear" in help_text()


async def test_slash_commands(store: SessionStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    script = [{"sse": text_stream("First.")}, {"sse": text_stream("Retried.")}, {"sse": text_stream("New one.")}]
    keys = ("/help\rhello\r/retry\r/model other-model\r/export md\r/export json\r/reasoning\r/bogus\r/tools\r"
            "/sessions\r/new\rfresh start\r/exit\r")
    output, server, app = await chat(script, keys, store)
    assert "/resume [ID]" in output
    assert server.requests[1]["messages"] == [{"role": "user", "content": "hello"}]  # /retry resent it
    assert server.requests[2]["model"] == "other-model"
    assert server.requests[2]["messages"] == [{"role": "user", "content": "fresh start"}]  # /new
    assert "unknown command /bogus; /help lists the commands" in output
    assert "reasoning is now hidden" in output
    first = next(s for s in store.recent() if s.title == "hello")
    assert authorless(store.messages(first.id)) == [{"role": "user", "content": "hello"},
                                        {"role": "assistant", "content": "Retried."}]
    assert first.model == "other-model"
    # the agent-experience issue (34 §3): /export wrote into the repository chat works in; it writes to the
    # data folder and says where
    exports = exports_dir()
    assert "Retried." in (exports / f"crow-session-{first.id}.md").read_text()
    assert json.loads((exports / f"crow-session-{first.id}.json").read_text())["session"]["id"] == first.id
    assert f"wrote {exports / f'crow-session-{first.id}.md'}" in output
    assert not list(tmp_path.glob("crow-session-*"))
    assert app.recorder.session_id != first.id


async def test_ctrl_d_and_double_ctrl_c_leave(store: SessionStore) -> None:
    output, _, _ = await chat([], "\x04", store)  # Ctrl-D
    output, _, _ = await chat([], "\x03\x03", store)  # Ctrl-C twice
    assert "press Ctrl-C again" in output
    assert store.recent() == []  # nothing said, nothing stored


async def test_input_history_is_kept_in_the_state_dir(store: SessionStore) -> None:
    import platformdirs

    await chat([{"sse": text_stream("Hi.")}], "hello there\r/exit\r", store)
    history = Path(platformdirs.user_state_dir("crow", appauthor=False)) / "chat_history"
    assert "+hello there" in history.read_text()


async def test_no_session_records_nothing(store: SessionStore) -> None:
    await chat([{"sse": text_stream("Hi.")}], "hello\r/exit\r", store, options=ChatOptions(session=False))
    assert store.recent() == []


async def test_alt_enter_inserts_a_newline_and_enter_sends(store: SessionStore) -> None:
    _, server, _ = await chat([{"sse": text_stream("Two lines.")}], "line one\x1b\rline two\r/exit\r", store)
    assert server.requests[0]["messages"] == [{"role": "user", "content": "line one\nline two"}]


async def test_a_path_is_a_message_not_a_command(store: SessionStore) -> None:
    _, server, _ = await chat([{"sse": text_stream("A file.")}], "/etc/hosts is what?\r/exit\r", store)
    assert server.requests[0]["messages"] == [{"role": "user", "content": "/etc/hosts is what?"}]


async def test_a_tool_turn_in_a_colour_terminal(store: SessionStore, tools_dir: Path) -> None:
    script = [{"sse": tool_calls_sse(("call_g", "guarded", {"text": "x"}))},
              {"sse": text_stream("# Done\n\nThe **tool** ran.\n")}]
    out = io.StringIO()
    with ReplayServer(script) as server, create_pipe_input() as pipe:
        pipe.send_text("go\ry\r/exit\r")
        console = Console(file=out, width=80, force_terminal=True, color_system=None)
        app = ChatApp(Settings(model="test-model", base_url=server.base_url),
                      chat_options(tools_dirs=(str(tools_dir),)), console=console, pt_input=pipe,
                      pt_output=DummyOutput(), store=store)
        assert not app.view.plain
        await asyncio.wait_for(app.run(), 120)  # bounds a hang
    text = out.getvalue()
    assert '✓ guarded({"text": "x"}) ok' in text
    assert "The tool ran." in text  # rendered Markdown (live frames in between are erased on a terminal)
    assert text.rstrip().endswith(f"session {app.recorder.session_id}")
    assert server.requests[1]["messages"][2]["content"] == "guarded ran: x"


# found trying it as a new user (third round)
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


# issue: as `crow run` did (run_prompt), a chat that had opened the session store itself (as `crow chat` does)
# kept its session locked and the store open after it ended: a caller in the same process could not continue it
async def test_a_chat_that_opened_the_store_leaves_its_session_free_when_it_ends(tmp_path: Path) -> None:
    with ReplayServer([{"sse": text_stream("one")}]) as server, create_pipe_input() as pipe:
        pipe.send_text("hi\r/exit\r")
        app = ChatApp(Settings(model="test-model", api_key="sk-test", base_url=server.base_url), ChatOptions(),
                      console=Console(file=io.StringIO(), width=100), pt_input=pipe, pt_output=DummyOutput())
        assert await app.run() == 0
    assert app.recorder is not None and app.recorder.session_id is not None
    with SessionStore() as store:
        assert [m["content"] for m in store.load(app.recorder.session_id)] == ["hi", "one"]  # not "in use"


# found trying it as a new user (third round)
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


# /compact and /usage with the context window in chat (issue 13)
async def test_compact_summarises_older_exchanges_and_later_requests_start_from_it(store: SessionStore) -> None:
    script = [{"sse": text_stream(f"answer {n}" + " and more" * 200 * (n == 0))} for n in range(3)]
    script += [{"sse": text_stream("SUMMARY: one, two")}, {"sse": text_stream("fine")}]
    keys = "one\rtwo\rthree\r/compact the numbers\rfour\r/usage\r/exit\r"
    settings = Settings(model="test-model", api_key="sk-test", context_window=8192)
    output, server, app = await chat(script, keys, store, settings=settings)
    summary_request = server.requests[3]
    assert "tools" not in summary_request
    assert "USER: one" in summary_request["messages"][-1]["content"]
    assert "keep in particular: the numbers" in summary_request["messages"][-1]["content"]
    sent = server.requests[4]["messages"]
    # the summary message, merged with the first exchange kept verbatim (one user message, not two in a row)
    assert sent[0]["content"].endswith("SUMMARY: one, two\n\ntwo") and "one\n" not in sent[0]["content"]
    assert [m["content"] for m in sent[1:]] == ["answer 1", "three", "answer 2", "four"]
    assert "compacted the conversation" in output
    # issue: a new user's /compact was announced as "the conversation is near the model's context window" at
    # a few tokens of 8,192: it is compacted because the user asked
    assert "near the model's context window" not in output and "compacting as asked" in output
    assert "context: " in output and "/ 8,192 tokens" in output
    stored = store.messages(app.recorder.session_id)
    assert [m["content"] for m in stored if m["role"] == "user"] == ["one", "two", "three", "four"]
    assert len(store.checkpoints(app.recorder.session_id)) == 1


async def test_compact_that_would_make_the_conversation_longer_leaves_it(store: SessionStore) -> None:
    # seen by a new-user tester (wave 6): /compact of one short exchange said "compacted … 333 → 356 tokens"
    script = [{"sse": text_stream(f"answer {n}")} for n in range(3)]
    script += [{"sse": text_stream("SUMMARY: the user counted one and two, and was answered each time.")}]
    settings = Settings(model="test-model", api_key="sk-test", context_window=8192)
    output, _, app = await chat(script, "one\rtwo\rthree\r/compact\r/exit\r", store, settings=settings)
    assert "compacting would not make the conversation smaller" in output and "compacted the" not in output
    assert "1 earlier messages" not in output
    assert store.checkpoints(app.recorder.session_id) == []


# AGENTS.md in chat, and /instructions says where they came from (issue 13)
async def test_instructions_are_loaded_and_shown(store: SessionStore, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "AGENTS.md").write_text("Use tabs.")
    monkeypatch.chdir(tmp_path)
    output, server, _ = await chat([{"sse": text_stream("ok")}], "/instructions\rhi\r/exit\r", store)
    assert f"project: {tmp_path / 'AGENTS.md'} (9 bytes)" in output
    system = server.requests[0]["messages"][0]
    assert system["role"] == "system" and system["content"].endswith("Use tabs.")


# prompt files: custom slash commands (Claude Code's .claude/commands convention)
async def test_a_prompt_file_is_a_slash_command(store: SessionStore, tmp_path: Path, _isolated_home: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    prompts, mine = tmp_path / ".crow/prompts", _isolated_home / ".config/crow/prompts"
    prompts.mkdir(parents=True)
    mine.mkdir(parents=True)
    (prompts / "review.md").write_text("# Review \x1b[2Jcarefully\n\nReview $ARGUMENTS carefully.\n")
    (mine / "review.md").write_text("The user's review, hidden by the project's.")
    (mine / "hello.md").write_text("Say hello.")
    (prompts / "help.md").write_text("Never used: /help is crow's.")
    (prompts / "bad.md").write_bytes(b"caf\xe9")
    (prompts / "with space.md").write_text("Never used: no prompt name.")
    monkeypatch.chdir(tmp_path)
    script = [{"sse": text_stream("Reviewed.")}, {"sse": text_stream("Bonjour.")}]
    keys = "/help\r/review\r/review src/app.py\r/hello in French\r/bad\r/nope\r/exit\r"
    output, server, _ = await chat(script, keys, store)
    assert [r["messages"][-1] for r in server.requests] == [
        {"role": "user", "content": "# Review \x1b[2Jcarefully\n\nReview src/app.py carefully."},
        {"role": "user", "content": "Say hello.\n\nin French"}]  # no $ARGUMENTS: the rest after a blank line
    assert "uses $ARGUMENTS and none were given (/review TEXT); nothing was sent" in output
    assert output.count(f"/review: the project's {prompts / 'review.md'} is used, not your {mine / 'review.md'}") == 1
    assert output.count(f"{prompts / 'help.md'} is not used: /help is a built-in command") == 1
    # found by a new-user tester (wave 5): a misnamed file was left out of /help without a word
    assert f"{prompts / 'with space.md'} is not used: a prompt file's name is letters" in output
    lines = output.splitlines()
    assert any(line.startswith("/review TEXT") and line.endswith("Review \\u001b[2Jcarefully") for line in lines)
    assert any(line.startswith("/hello ") and line.endswith("Say hello.") for line in lines)
    assert "/resume [ID]" in output  # the built-in /help still
    assert f"crow: error: prompt file {str(prompts / 'bad.md')!r} cannot be read: it is not UTF-8 text" in output
    assert "\x1b" not in output
    assert "unknown command /nope; /help lists the commands" in output
    # found by a new-user tester (wave 5): the title was the file's text; it is what was typed
    assert store.recent()[0].title == "/review src/app.py"


async def test_a_prompt_file_never_replaces_a_built_in_command(store: SessionStore, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".crow/prompts").mkdir(parents=True)
    (tmp_path / ".crow/prompts/new.md").write_text("Never sent.")
    monkeypatch.chdir(tmp_path)
    output, server, _ = await chat([], "/new\r/new\r/exit\r", store)
    assert output.count(f"{tmp_path / '.crow/prompts/new.md'} is not used: /new is a built-in command") == 1
    assert output.count("new session started") == 2 and server.requests == []


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


# @path mentions attach files in chat (issue 13)
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
    # the agent-experience issue (34 §3): the session was titled with the attached file's text after the prompt
    assert [s.title for s in store.recent()] == ["what about @notes.txt?"]


# /undo removes the last exchange and restores the files crow's file tools changed (issue 13)
async def test_undo_restores_files_and_the_history(store: SessionStore, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.txt").write_text("before\n")
    monkeypatch.chdir(tmp_path)
    write = json.dumps({"path": "a.txt", "content": "after\n"})
    script = [{"sse": text_stream("hello")}, {"sse": tool_calls_sse(("c1", "write_file", json.loads(write)))},
              {"sse": text_stream("written")}, {"sse": text_stream("again")}]
    keys = "hi\rchange a.txt\r/undo\rnext\r/exit\r"
    output, server, app = await chat(script, keys, store, options=chat_options(yes=True))
    assert f"restores {tmp_path / 'a.txt'}" in output and "undone" in output
    assert output.index("restores") < output.index("undone")
    assert (tmp_path / "a.txt").read_text() == "before\n"
    sent = server.requests[3]["messages"]
    assert [m["content"] for m in sent if m["role"] == "user"] == ["hi", "next"]
    stored = store.messages(app.recorder.session_id)
    assert [m["content"] for m in stored] == ["hi", "hello", "next", "again"]


async def test_export_works_without_a_session_and_to_a_chosen_path(store: SessionStore, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 11 item 10 and friction (found trying it as a new user): `crow chat --no-session` then /export said
    # "nothing to export yet" after several turns; /export could not write outside the current folder
    monkeypatch.chdir(tmp_path)
    elsewhere = tmp_path / "out" / "talk.json"
    elsewhere.parent.mkdir()
    (tmp_path / "afile").write_text("")
    # found trying it as a new user (fourth round): `/export jsn` wrote `jsn`
    keys = (f"/export\rhello\r/export\r/export {elsewhere}\r/export md {tmp_path / 'afile' / 'x.md'}\r"
            f"/export md {tmp_path / 'new' / 'sub' / 'x.md'}\r/export jsn\r/exit\r")
    output, _, _ = await chat([{"sse": text_stream("Hi.")}], keys, store, options=ChatOptions(session=False))
    assert "nothing to export yet" in output.split("Hi.")[0]
    (unsaved,) = exports_dir().glob("crow-session-unsaved-*.md")
    assert "Hi." in unsaved.read_text()
    assert authorless(json.loads(elsewhere.read_text())["messages"][-1]) == {"role": "assistant", "content": "Hi."}
    assert "crow: error: cannot write" in output and store.recent() == []
    # seen by a new-user tester: a missing folder was made without a word; it is refused, as `cp` does
    assert f"crow: error: cannot write {tmp_path / 'new' / 'sub' / 'x.md'}: no such folder" in output
    assert not (tmp_path / "new").exists()
    assert "unknown format 'jsn'" in output and not (tmp_path / "jsn").exists()


# found by a new-user tester (wave 5): `/export /etc/passwd` replaced the file (mode 0600) without a word;
# `/export md json` wrote a file `json` into the repository; `/export DIR/` was "a directory"; the transcript
# was titled "Untitled session" (the session as it was before its first message)
async def test_export_never_overwrites_takes_a_folder_and_has_the_title(store: SessionStore, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    mine = tmp_path / "mine.md"
    mine.write_text("my own notes")
    (tmp_path / "out").mkdir()
    keys = f"first words\r/export {mine}\r/export md json\r/export {tmp_path / 'out'}\r/export new/\r/exit\r"
    output, _, app = await chat([{"sse": text_stream("Hi.")}], keys, store)
    assert mine.read_text() == "my own notes" and f"{mine} exists; crow does not overwrite" in output
    assert "/export: one format at a time" in output and not (tmp_path / "json").exists()
    sid = app.recorder.session_id
    assert (tmp_path / "out" / f"crow-session-{sid}.md").read_text().startswith("# first words\n")
    assert not (tmp_path / "new").exists() and "no such folder" in output  # `/export new/`: no folder made


async def test_export_to_a_path_with_spaces_when_quoted(store: SessionStore, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # issue: a new user's `/export "my notes.md"` was refused as an unknown format '"my': no path with a space
    # in it could be exported to
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out dir").mkdir()
    keys = ("hello\r/export \"my notes.md\"\r/export json 'out dir/t.json'\r/export \"x.md\r"
            "/export md two words.md\r/exit\r")
    output, _, _ = await chat([{"sse": text_stream("Hi.")}], keys, store)
    assert "Hi." in (tmp_path / "my notes.md").read_text()
    assert json.loads((tmp_path / "out dir" / "t.json").read_text())["messages"][-1]["content"] == "Hi."
    assert "crow: error: /export: No closing quotation" in output and not (tmp_path / '"x.md').exists()
    assert "takes one path (quote one that holds spaces)" in output and not (tmp_path / "two").exists()


async def test_tools_are_listed_in_aligned_columns(store: SessionStore, tools_dir: Path) -> None:
    # smaller items: /tools was not aligned (issue 11)
    output, _, _ = await chat([], "/tools\r/exit\r", store, options=chat_options(tools_dirs=(str(tools_dir),)))
    lines = [line for line in output.splitlines() if line.startswith(("read_file ", "run_shell ", "guarded "))]
    assert len(lines) == 3 and len({line.index(line.split()[1]) for line in lines}) == 1, lines


async def test_a_damaged_session_store_is_said_once_and_the_chat_goes_on(tmp_path: Path) -> None:
    # issue 11 item 13 (found trying it as a new user): random bytes in sessions.db stopped `crow chat` with
    # "file is not a database" while `crow run` carried on with a warning
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


async def test_export_to_a_fifo_is_refused_and_the_chat_goes_on(store: SessionStore, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # issue: a new user's `/export pipe` (a FIFO) blocked chat for good, deaf to Ctrl-C, SIGTERM and SIGHUP;
    # the export is private (0600) as the session store is
    import os

    monkeypatch.chdir(tmp_path)
    os.mkfifo(tmp_path / "pipe")
    keys = "hello\r/export md pipe\r/export md talk.md\r/exit\r"
    output, _, _ = await chat([{"sse": text_stream("Hi.")}], keys, store, options=ChatOptions(session=False))
    assert "crow: error: cannot write pipe: a FIFO (named pipe)" in output
    assert "Hi." in (tmp_path / "talk.md").read_text()
    assert (tmp_path / "talk.md").stat().st_mode & 0o777 == 0o600


async def test_a_non_utf8_byte_typed_is_cleaned_and_the_chat_goes_on(store: SessionStore) -> None:
    # issue: one non-UTF-8 byte typed into `crow chat` gave an internal error, and every later message failed the
    # same way until restart (the bad message stayed in memory)
    script = [{"sse": text_stream("Got it.")}, {"sse": text_stream("Hello.")}]
    output, server, _ = await chat(script, b"caf\xe9 au lait\rhello\r/exit\r", store)
    assert "internal error" not in output and "Got it." in output and "Hello." in output
    assert server.requests[0]["messages"][-1] == {"role": "user", "content": "caf\ufffd au lait"}
    assert [m["content"] for m in server.requests[1]["messages"] if m["role"] == "user"] == \
        ["caf\ufffd au lait", "hello"]


async def test_a_slash_alone_or_a_double_slash_is_not_sent(store: SessionStore) -> None:
    # issue: `/` alone and `//x` went to the model as messages
    output, server, _ = await chat([{"sse": text_stream("Hi.")}], "/\r//x\rhello\r/exit\r", store)
    assert "unknown command /; /help lists the commands" in output
    assert "unknown command //x; /help lists the commands" in output
    assert [m["content"] for m in server.requests[0]["messages"] if m["role"] == "user"] == ["hello"]


def test_the_input_history_keeps_no_paste_and_is_cut_when_it_grows(tmp_path: Path) -> None:
    # issue: the chat input history grew by every paste and was loaded whole at start
    from crow_cli.surfaces.chat.terminal import MAX_HISTORY_BYTES, _history_path, input_history  # noqa: PLC2701

    path = _history_path()
    entry = "\n# 2026-01-01 00:00:00.000000\n+{}\n"
    path.write_text("".join(entry.format(f"old message {i} " + "x" * 200) for i in range(5000)))
    history = input_history()
    loaded = list(history.load_history_strings())
    assert path.stat().st_size <= MAX_HISTORY_BYTES and path.stat().st_mode & 0o777 == 0o600
    assert loaded[0].startswith("old message 4999 ") and all(s.startswith("old message ") for s in loaded)
    history.store_string("p" * 100_000)
    history.store_string("short one")
    assert "p" * 5000 not in path.read_text() and path.read_text().endswith("+short one\n")



# found trying it as a new user (wave 3): a folder where the input history file goes (or a state folder that
# is a file) ended `crow chat` at start with `crow: internal error: IsADirectoryError`
def test_an_input_history_that_cannot_be_used_leaves_the_chat_without_it(monkeypatch: pytest.MonkeyPatch,
                                                                          tmp_path: Path) -> None:
    from crow_cli.surfaces.chat.terminal import _history_path, input_history  # noqa: PLC2701

    path = _history_path()
    path.unlink()
    path.mkdir()
    history = input_history()
    assert list(history.load_history_strings()) == []
    history.store_string("hello")  # not kept, not raised
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_STATE_HOME", str(blocker))
    in_memory = input_history()
    in_memory.store_string("kept for this chat")
    assert list(in_memory.load_history_strings()) == ["kept for this chat"]

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
    # issue: start-up and per-turn cost: the SDK's import (~0.7 s) is paid while the user types
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


# found in a CI dry run (wave 3): a Ctrl-D sent while a turn ended was lost and the chat waited forever. While a
# turn runs the terminal was in canonical mode, where Ctrl-D is no key but an end-of-line the next read never sees
def test_ctrl_d_typed_while_a_turn_runs_quits_at_the_next_prompt(tmp_path: Path) -> None:
    started, gate = tmp_path / "started", tmp_path / "gate"
    wait = f"touch {started}; while [ ! -f {gate} ]; do sleep 0.05; done; echo released"
    with ReplayServer(script([("c1", "run_shell", {"command": wait})], final="Done.")) as server, ChatTerminal(
            ["--base-url", server.base_url, "--api-key", "sk-test", "--model", "m", "--yes", "--sandbox", "off"],
            cwd=tmp_path) as term:
        term.expect("›")
        term.send("go\r")
        wait_for(started.exists)
        term.send("\x04")  # typed ahead, while the tool runs
        gate.touch()
        term.expect("Done.")
        assert term.wait() == 0
    assert len(server.requests) == 2


async def test_a_typed_escape_sequence_that_looks_like_a_mouse_event_is_no_internal_error(store: SessionStore) -> None:
    # found trying it as a new user (wave 3): ESC [ 3 1 m typed at the prompt (a colour code pasted where the
    # terminal does not bracket pastes) reached prompt-toolkit's mouse handler: a traceback, then "Press ENTER to
    # continue..." ate the next line
    out, server, _app = await chat([{"sse": text_sse("Hello.")}], b"\x1b[31mhi\r/exit\r", store)
    assert [m["content"] for m in server.requests[0]["messages"] if m["role"] == "user"] == ["hi"]
    assert "Hello." in out


def test_a_piped_chat_reads_the_answer_to_an_approval_question_from_its_input(tmp_path: Path) -> None:
    # found trying it as a new user (wave 3): `printf 'write it\ny\nthanks\n' | crow chat`: the question read the
    # terminal's input through prompt-toolkit while the piped lines sat in crow's own buffer: it saw end of input
    # (no), and the "y" went to the model as the next message
    script = [{"sse": tool_calls_sse(("w1", "write_file", {"path": "new.txt", "content": "hi\n"}))},
              {"sse": text_sse("Written.")}, {"sse": text_sse("You're welcome.")}]
    with ReplayServer(script) as server:
        proc = crow("chat", "--base-url", server.base_url, "--api-key", "sk-test", "--model", "m",
                    input="write it\ny\nthanks\n", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "new.txt").read_text() == "hi\n"
    assert [m["content"] for m in server.requests[-1]["messages"] if m["role"] == "user"] == ["write it", "thanks"]
    assert "Allow write_file? [y]es / [n]o [reason] / [a]lways for write_file: " in proc.stdout


# Chat's prompt is up at once while a slow MCP server starts; a message sent before it is up waits for it
# (one line naming it) and then has its tools (issue 34)
def _slow_mcp_config(tmp_path: Path, gate: Path, started: Path) -> Path:
    """A config whose one MCP server (the stdlib fault server) starts only once `gate` exists."""
    server_py = Path(__file__).resolve().parents[1] / "tools" / "mcp_fault_server.py"
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


# A server that comes up while the prompt waits says so above the prompt, and its tools are listed (issue 34)
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
    assert 'run_shell({"command": "echo hello > said.txt; cat said.txt"})' in output  # as typed: no time limit
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
    # found by a new-user tester (wave 5): the person read the model's advice ("Do not retry it; find another way
    # or ask the us…"); the status line says the refusal
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
