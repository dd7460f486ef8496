"""`crow chat` on a real terminal (a pty) against the replay server: SIGTERM / SIGHUP end it cleanly,
with a valid stored session and exit code 143 / 129; Ctrl-C at an approval prompt stops the turn."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from crow_cli.sessions import SessionStore
from tests.replay_server import ReplayServer, text_stream
from tests.surfaces.chat_terminal import ChatTerminal
from tests.surfaces.test_chat import assert_valid, tool_calls_sse

TOOLS = '''
import asyncio
from crow_cli.tools import tool

@tool
async def nap(seconds: float) -> str:
    """Sleep on the event loop.

    Args:
        seconds: how long.
    """
    await asyncio.sleep(seconds)
    return "rested"

@tool(needs_approval=True)
def guarded(text: str) -> str:
    """Needs approval.

    Args:
        text: anything.
    """
    return "guarded ran: " + text
'''

CANCELLED = "Error: the tool call was cancelled by the user; no result."


@pytest.fixture
def tools_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "tools"
    folder.mkdir()
    (folder / "termtools.py").write_text(TOOLS)
    return folder


def chat_args(base_url: str, tools_dir: Path) -> list[str]:
    return ["--base-url", base_url, "--api-key", "sk-test", "--model", "test-model", "--tools-dir", str(tools_dir)]


def stored_session() -> list[dict]:
    with SessionStore() as store:
        (info,) = store.recent()
        return store.messages(info.id)


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_signal_during_a_turn_saves_a_valid_session(tmp_path: Path, tools_dir: Path, sig: int, code: int) -> None:
    script = [{"sse": tool_calls_sse(("call_q", "nap", {"seconds": 0}), ("call_s", "nap", {"seconds": 60}))},
              {"sse": text_stream("never sent")}]
    with ReplayServer(script) as server, ChatTerminal(chat_args(server.base_url, tools_dir), cwd=tmp_path) as term:
        term.expect("›")
        term.send("take a nap\r")
        term.expect('nap({"seconds": 60})')  # its spinner: the long nap runs
        if sig == signal.SIGHUP:
            term.hang_up()  # the terminal window was closed
        else:
            term.signal(sig)
        assert term.wait() == code
        err = term.stderr()
    assert "Traceback" not in err and "Exception" not in err, err
    stored = stored_session()
    assert_valid(stored)
    assert [(m["tool_call_id"], m["content"]) for m in stored[2:]] == [("call_q", "rested"), ("call_s", CANCELLED)]
    assert len(server.requests) == 1


def test_sigterm_at_the_prompt_exits_143(tmp_path: Path, tools_dir: Path) -> None:
    with ReplayServer([{"sse": text_stream("Hello there.")}]) as server, \
            ChatTerminal(chat_args(server.base_url, tools_dir), cwd=tmp_path) as term:
        term.expect("›")
        term.send("hi\r")
        term.expect("Hello there.")
        term.expect("›")
        term.signal(signal.SIGTERM)
        assert term.wait() == 143
        err = term.stderr()
    assert "Traceback" not in err, err
    assert stored_session() == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello there."}]


def test_ctrl_c_at_an_approval_prompt_on_a_terminal_stops_the_turn(tmp_path: Path, tools_dir: Path) -> None:
    script = [{"sse": tool_calls_sse(("call_g1", "guarded", {"text": "one"}), ("call_g2", "guarded", {"text": "two"}))},
              {"sse": text_stream("Fine.")}]
    with ReplayServer(script) as server, ChatTerminal(chat_args(server.base_url, tools_dir), cwd=tmp_path) as term:
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


def test_a_tool_line_does_not_join_the_approval_question_on_a_terminal(tmp_path: Path, tools_dir: Path) -> None:
    import time

    script = [{"sse": tool_calls_sse(("call_n", "nap", {"seconds": 0.1}), ("call_g", "guarded", {"text": "x"}))},
              {"sse": text_stream("Both done.")}]
    with ReplayServer(script) as server, ChatTerminal(chat_args(server.base_url, tools_dir), cwd=tmp_path) as term:
        term.expect("›")
        term.send("go\r")
        term.expect("Allow guarded")
        time.sleep(1.0)  # nap (0.1 s) ends while the question waits
        term.send("y\r")
        term.expect("Both done.")
        term.expect("›")
        term.send("\x04")
        assert term.wait() == 0
        screen = term.screen()
    assert "✓ nap" in screen
    joined = [line for line in screen.splitlines() if "Allow guarded" in line and ("✓" in line or "⠋" in line)]
    assert not joined, screen
