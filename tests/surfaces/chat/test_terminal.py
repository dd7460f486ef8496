"""The chat's terminal (`surfaces/chat/terminal`).

Properties guarded here:

- the input history is kept in the state dir, keeps no paste, is cut when it grows, and a history that
  cannot be used leaves the chat without one;
- Alt-Enter inserts a newline and Enter sends;
- a Ctrl-D typed while a turn runs quits at the next prompt (no echo, no canonical mode during a turn);
- a piped chat reads the answer to an approval question from its input.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from crow_cli.sessions import SessionStore
from tests.replay_server import ReplayServer, text_stream
from tests.support import ChatTerminal, chat, crow, script, text_sse, tool_calls_sse, wait_for


async def test_input_history_is_kept_in_the_state_dir(store: SessionStore) -> None:
    import platformdirs

    await chat([{"sse": text_stream("Hi.")}], "hello there\r/exit\r", store)
    history = Path(platformdirs.user_state_dir("crow", appauthor=False)) / "chat_history"
    assert "+hello there" in history.read_text()


async def test_alt_enter_inserts_a_newline_and_enter_sends(store: SessionStore) -> None:
    _, server, _ = await chat([{"sse": text_stream("Two lines.")}], "line one\x1b\rline two\r/exit\r", store)
    assert server.requests[0]["messages"] == [{"role": "user", "content": "line one\nline two"}]


def test_the_input_history_keeps_no_paste_and_is_cut_when_it_grows(tmp_path: Path) -> None:
    # the chat input history keeps no long paste, and is cut to MAX_HISTORY_BYTES when it grows past it
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


# A folder where the input history file goes (or a state folder that is a file) leaves the chat without a kept
# history (in memory only), never an internal error at start
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


# A Ctrl-D typed while a turn runs quits at the next prompt, never lost: in canonical mode Ctrl-D is no key but an
# end-of-line the next read never sees
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


def test_a_piped_chat_reads_the_answer_to_an_approval_question_from_its_input(tmp_path: Path) -> None:
    # `printf 'write it\ny\nthanks\n' | crow chat`: the question reads its answer ("y") from the piped lines in
    # crow's own buffer, not from the terminal through prompt-toolkit, and "y" never goes to the model
    script = [{"sse": tool_calls_sse(("w1", "write_file", {"path": "new.txt", "content": "hi\n"}))},
              {"sse": text_sse("Written.")}, {"sse": text_sse("You're welcome.")}]
    with ReplayServer(script) as server:
        proc = crow("chat", "--base-url", server.base_url, "--api-key", "sk-test", "--model", "m",
                    input="write it\ny\nthanks\n", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "new.txt").read_text() == "hi\n"
    assert [m["content"] for m in server.requests[-1]["messages"] if m["role"] == "user"] == ["write it", "thanks"]
    assert "Allow write_file? [y]es / [n]o [reason] / [a]lways for write_file: " in proc.stdout
