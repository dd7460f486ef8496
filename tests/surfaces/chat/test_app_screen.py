"""What the chat's screen shows (on a pseudo-terminal): a command's wrapped output, the status line under the
prompt, an answer streamed while the terminal is resized."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.replay_server import ReplayServer, text_stream
from tests.support import CROW, ChatTerminal, chunk, sse, wait_for

ARGS = ["--api-key", "sk-test", "--model", "test-model", "--no-session"]


def test_a_wrapped_line_of_command_output_keeps_its_indent(tmp_path: Path) -> None:
    words = " ".join(f"w{n}" for n in range(10, 50))  # 159 columns: three rows at 60
    with ReplayServer([{"sse": text_stream("unused")}]) as server, ChatTerminal(
            ["--base-url", server.base_url, *ARGS, "--yes"], cwd=tmp_path, columns=60, rows=30) as term:
        term.expect("›")
        term.send('!for n in $(seq 10 49); do printf "w$n "; done; echo\r')  # the words are not in what is typed
        term.expect("w49")
        term.expect("(the command and its output")
        term.expect("›")
        shown = term.display()
        term.send("\x04")
        assert term.wait() == 0
    rows = [row for row in shown if "w" in row and row.lstrip().startswith("w")]
    assert "".join(row.strip() + " " for row in rows).strip() == words, "\n".join(shown)
    assert len(rows) >= 3 and all(row.startswith("    w") for row in rows), "\n".join(shown)


def _config(tmp_path: Path, body: str) -> str:
    path = tmp_path / "config.toml"
    path.write_text(body)
    return str(path)


def _status(term: ChatTerminal, pattern: str) -> list[str]:
    """Wait until a row of the screen matches `pattern` (regex); that row."""
    found: list[str] = []

    def shown() -> bool:
        found[:] = [row.strip() for row in term.display() if re.search(pattern, row)]
        return bool(found)
    wait_for(shown)
    return found


def test_the_status_line_under_the_prompt_shows_model_mode_context_and_session(tmp_path: Path) -> None:
    config = _config(tmp_path, "context_window = 2000\n")
    with ReplayServer([{"sse": text_stream("Hello.")}]) as server, ChatTerminal(
            ["--base-url", server.base_url, "--api-key", "sk-test", "--model", "test-model", "--no-tools",
             "--config", config], cwd=tmp_path, answer_cpr=True) as term:
        term.expect("›")
        assert _status(term, "test-model · ask") == ["test-model · ask · 0% of 2.0k context · new session"]
        term.send("\x1b[Z")  # Shift+Tab: the next mode shows at once
        _status(term, "test-model · auto-edit")
        term.send("hi\r")
        term.expect("Hello.")
        row = _status(term, r"context · session \S+")
        term.send("\x04")
        assert term.wait() == 0
    assert re.fullmatch(r"test-model · auto-edit · [1-9]\d*% of 2\.0k context · session \S+", row[0]), row


def test_a_status_line_command_gets_the_status_as_json_and_its_first_line_shows(tmp_path: Path) -> None:
    script = tmp_path / "status.py"
    script.write_text("import json, sys\n"
                      "s = json.load(sys.stdin)\n"
                      "print(f\"\\x1b[31mMINE {s['model']} {s['mode']} {s['context']['tokens']} {s['cwd']}\")\n"
                      "print('second line')\n")
    config = _config(tmp_path, f"[chat]\nstatus_line = '{sys.executable} {script}'\n")
    with ReplayServer([{"sse": text_stream("unused")}]) as server, ChatTerminal(
            ["--base-url", server.base_url, *ARGS, "--no-tools", "--config", config], cwd=tmp_path,
            columns=200, answer_cpr=True) as term:
        term.expect("›")
        row = _status(term, "MINE test-model ask")
        shown = term.display()
        term.send("\x04")
        assert term.wait() == 0
    assert row == [f"[31mMINE test-model ask 0 {tmp_path.resolve()}"]  # its ESC dropped: no colour, no escape
    assert "second line" not in "\n".join(shown)


@pytest.mark.parametrize(("command", "why"), [("sleep 30", "it took longer than 1 s"),
                                              ("exit 3", "it ended with exit code 3")])
def test_a_failing_status_line_command_leaves_the_builtin_line_and_warns_once(tmp_path: Path, command: str,
                                                                              why: str) -> None:
    config = _config(tmp_path, f"[chat]\nstatus_line = '{command}'\n")
    with ReplayServer([{"sse": text_stream("Hello.")}]) as server, ChatTerminal(
            ["--base-url", server.base_url, *ARGS, "--no-tools", "--config", config], cwd=tmp_path,
            answer_cpr=True) as term:
        term.expect("›")
        term.expect(f"crow: warning: the status line command is not used: {why};")
        _status(term, "test-model · ask · ")
        term.send("hi\r")
        term.expect("Hello.")
        _status(term, r"test-model · ask · [1-9]\d* tokens of context · not recorded")
        term.send("\x04")
        assert term.wait() == 0
        screen = term.screen()
    assert screen.count("the status line command is not used") == 1


def test_status_line_false_hides_the_line(tmp_path: Path) -> None:
    config = _config(tmp_path, "[chat]\nstatus_line = false\n")
    with ReplayServer([{"sse": text_stream("unused")}]) as server, ChatTerminal(
            ["--base-url", server.base_url, *ARGS, "--no-tools", "--config", config], cwd=tmp_path,
            answer_cpr=True) as term:
        term.expect("›")
        term.send("/hel")  # drawn after the prompt's first draw: that draw is on the screen
        term.expect("/hel")
        shown = term.display()
        term.send("\x15\x04")
        assert term.wait() == 0
    assert not any("test-model · ask" in row for row in shown), "\n".join(shown)


class TmuxChat:
    """`crow chat ARGS` in a tmux window `columns` x `rows` (a server of its own): a terminal that rewraps its rows
    on a resize and keeps those pushed past the top in its scrollback, which `text()` includes."""

    def __init__(self, args: list[str], *, cwd: Path, columns: int, rows: int) -> None:
        self.socket = f"crow-test-{os.getpid()}-{id(self)}"
        env = {k: v for k, v in os.environ.items() if k.startswith(("XDG_", "HOME", "PYTHON", "PATH", "CROW_"))}
        command = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + " " + shlex.join([CROW, "chat", *args])
        self._tmux("new-session", "-d", "-s", "chat", "-x", str(columns), "-y", str(rows), "-c", str(cwd),
                   f"env -i TERM=xterm-256color {command}")

    def _tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, "-f", os.devnull, *args], capture_output=True, text=True,
                              check=True).stdout

    def text(self) -> str:
        """The window's rows and its scrollback, each row rewrapped by the terminal joined back into one line."""
        return self._tmux("capture-pane", "-p", "-J", "-S", "-", "-t", "chat")

    def expect(self, text: str) -> None:
        wait_for(lambda: text in self.text())

    def send(self, *keys: str) -> None:
        self._tmux("send-keys", "-t", "chat", *keys)

    def resize(self, columns: int, rows: int) -> None:
        self._tmux("resize-window", "-t", "chat", "-x", str(columns), "-y", str(rows))

    def __enter__(self) -> TmuxChat:
        return self

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, check=False)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
@pytest.mark.parametrize(("before", "after"), [(120, 60), (120, 80), (60, 120)])
def test_a_terminal_resized_while_a_paragraph_streams_shows_it_once(tmp_path: Path, before: int, after: int) -> None:
    words = [f"word{n:02d}" for n in range(77)]
    paragraph = " ".join(words)
    answer = sse(chunk({"role": "assistant", "content": "Intro line.\n\n" + paragraph}),
                 chunk({"content": " and more.\n\nthe end."}), chunk({}, "stop"))
    (tmp_path / "work").mkdir()
    with ReplayServer([{"sse": answer, "hold_after_events": 1}]) as server, TmuxChat(
            ["--base-url", server.base_url, *ARGS, "--no-tools"], cwd=tmp_path / "work", columns=before,
            rows=40) as term:
        term.expect("›")
        term.send("go", "Enter")
        term.expect(words[-1])  # the paragraph is on the screen, the stream held
        term.resize(after, 40)
        server.release()
        term.expect("the end.")
        shown = term.text()
    assert {word: shown.count(word) for word in words} == dict.fromkeys(words, 1), shown
    assert shown.count("Intro line.") == 1 and shown.count("and more.") == 1, shown
