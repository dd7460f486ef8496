"""`crow chat` at a tool approval prompt: Ctrl-C stops the turn, the prompt shows `crow run`'s preview
of the call, and no output line lands on the prompt's line. In-process: prompt-toolkit pipe input, a
replay server on a real socket."""

from __future__ import annotations

import asyncio
import io
import json
import threading
from pathlib import Path

import pytest
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output.plain_text import PlainTextOutput
from rich.console import Console

from crow_cli.config import Settings
from crow_cli.history import ToolCall
from crow_cli.sessions import SessionStore
from crow_cli.surfaces.chat.app import ChatApp
from crow_cli.tools.approval import describe_call
from crow_cli.tools.builtin import BUILTIN_TOOLS
from crow_cli.tools.context import ToolContext
from tests.replay_server import ReplayServer, text_stream
from tests.support import (
    CANCELLED,
    assert_valid,
    authorless,
    chat,
    chat_options,
    needs_sandbox,
    tool_calls_sse,
    wait_for,
)


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
    assert output.count('"old_string"') == 1  # in its → line only: the question shows the diff, not the JSON
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


# issue: a scripted model that tries to escape gets nothing out of `crow chat --yes` either: what the sandbox
# stops is a question (answered no here), and a key in a file never reaches the model
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
