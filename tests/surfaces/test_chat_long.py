"""`/compact` and `/undo` in `crow chat` on a real terminal (a pty) against the replay server (issue 13:
"a pty test for /compact and /undo in chat")."""

from __future__ import annotations

import json
from pathlib import Path

from crow_cli.sessions import SessionStore
from tests.replay_server import ReplayServer, text_stream
from tests.support import ChatTerminal, chunk, sse, tool_delta


def _write_turn(path: str, content: str) -> str:
    args = json.dumps({"path": path, "content": content})
    return sse(chunk({"role": "assistant", "content": None}), chunk({"tool_calls": [tool_delta(0, "c1", "write_file",
                                                                                               args)]}),
               chunk({}, "tool_calls"))


def test_compact_and_undo_on_a_terminal(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("original\n")
    long = " and more" * 100  # a summary shorter than what it stands for (a longer one is not installed)
    script = [{"sse": text_stream("first answer" + long)}, {"sse": text_stream("second answer")},
              {"sse": text_stream("third answer")}, {"sse": text_stream("SUMMARY: three questions")},
              {"sse": _write_turn("a.txt", "changed\n")}, {"sse": text_stream("file written")}]
    with ReplayServer(script) as server:
        args = ["--base-url", server.base_url, "--api-key", "sk-test", "--model", "test-model", "--yes"]
        with ChatTerminal(args, cwd=tmp_path) as term:
            for n, word in enumerate(("first", "second", "third")):
                term.expect("›")
                term.send(f"question {n}\r")
                term.expect(f"{word} answer")
            term.send("/compact\r")
            term.expect("compacted the conversation (summarised earlier exchanges)")
            term.send("change a.txt\r")
            term.expect("file written")
            assert (tmp_path / "a.txt").read_text() == "changed\n"
            term.send("/undo\r")
            term.expect("undone")
            term.expect("›")  # the next prompt is up: a Ctrl-D sent before it can be lost
            screen = term.screen()
            term.send("\x04")  # Ctrl-D
            assert term.wait() == 0
            err = term.stderr()
    assert "Traceback" not in err, err
    assert "restores" in screen and screen.index("restores") < screen.index("undone")
    assert (tmp_path / "a.txt").read_text() == "original\n"
    assert "question 0" in server.requests[3]["messages"][-1]["content"]  # the summary request
    assert server.requests[4]["messages"][0]["content"].startswith("[crow: the earlier conversation was compacted")
    with SessionStore() as store:
        (info,) = store.recent()
        assert [m["content"] for m in store.messages(info.id) if m["role"] == "user"] == [
            "question 0", "question 1", "question 2"]
        assert len(store.checkpoints(info.id)) == 1
