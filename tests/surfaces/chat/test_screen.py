"""What the chat's screen shows (on a pseudo-terminal): a command's wrapped output, the status line under the
prompt, an answer streamed while the terminal is resized."""

from __future__ import annotations

from pathlib import Path

from tests.replay_server import ReplayServer, text_stream
from tests.support import ChatTerminal

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
