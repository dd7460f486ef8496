"""`crow chat` on a real terminal (a pty) against the replay server: SIGTERM / SIGHUP end it cleanly,
with a valid stored session and exit code 143 / 129; Ctrl-C at an approval prompt stops the turn."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from crow_cli.sessions import SessionStore
from tests.replay_server import ReplayServer, text_stream
from tests.support import (
    CANCELLED,
    ChatTerminal,
    assert_valid,
    authorless,
    chunk,
    sse,
    text_sse,
    tool_calls_sse,
    wait_for,
)


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
    # issue 11 item 12 (found trying it as a new user): the live display's cleanup wrote to the dead terminal,
    # "internal error: OSError: [Errno 5] Input/output error" and exit 1
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
    # found by a test that failed 1 in N under load: a write to the closed terminal (EIO) racing the SIGHUP
    # ended the chat with exit 1; the first write that fails now ends the turn and the chat as a hang-up would
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
