"""`crow run`'s command: the prompt from its argument and standard input (crow's app in this process,
`crow_here`; tests/test_cli.py pipes into `crow` processes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.replay_server import ReplayServer
from tests.support import crow_here, png, run_args, text_sse


# UTF-16 piped in (with its byte-order mark, as Windows tools write it) and UTF-8 with a mark are decoded,
# as -f and AGENTS.md decode them
@pytest.mark.parametrize("encoding", ["utf-16", "utf-8-sig"])
def test_piped_text_is_decoded_by_its_byte_order_mark(encoding: str, tmp_path: Path) -> None:
    piped = tmp_path / "piped"
    piped.write_bytes("café\n".encode(encoding))
    with ReplayServer([{"sse": text_sse("ok")}]) as server:
        code = crow_here(*run_args(server, "--no-tools", "--no-session", "--stdin", "Review"), stdin=piped)
    assert code == 0
    assert server.requests[0]["messages"][-1]["content"] == "Review\n\ncafé\n"


# A session's title is the prompt as typed: not the piped input (`git diff | crow run "Review"`), nor a `-f`
# file's text after a short prompt
def test_a_sessions_title_is_the_typed_prompt_not_piped_input_or_files(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from crow_cli.sessions import SessionStore

    monkeypatch.chdir(tmp_path)
    piped = tmp_path / "piped"
    piped.write_text("diff --git a/x b/x\n")
    (tmp_path / "notes.txt").write_text("attached words\n")
    with ReplayServer([{"sse": text_sse("ok")}, {"sse": text_sse("ok")}]) as server:
        assert crow_here(*run_args(server, "--no-tools", "--stdin", "Review"), stdin=piped) == 0
        assert crow_here(*run_args(server, "--no-tools", "-f", "notes.txt", "Summarise")) == 0
    assert server.requests[0]["messages"][-1]["content"].startswith("Review\n\ndiff --git")
    with SessionStore() as store:
        assert sorted(s.title for s in store.recent()) == ["Review", "Summarise"]


PNG = png()


# A screenshot piped in (`screencap | crow run "what is this?"`) is attached as an image, not decoded as text
def test_an_image_piped_on_stdin_is_attached_not_decoded(tmp_path: Path) -> None:
    piped = tmp_path / "shot"
    piped.write_bytes(PNG)
    with ReplayServer([{"sse": text_sse("ok")}]) as server:
        code = crow_here(*run_args(server, "--no-tools", "--no-session", "What is this?"), stdin=piped)
    assert code == 0
    content = server.requests[0]["messages"][-1]["content"]
    assert content[0] == {"type": "text", "text": "What is this?\n\n[attached image: stdin]"}
    assert content[1]["image_url"]["url"].startswith("data:image/png;base64,iVBORw0KGgo")
    assert set(content[1]) == {"type", "image_url"}  # its name ("stdin") is kept in the session, never sent


def test_an_image_on_stdin_cannot_be_the_prompt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    piped = tmp_path / "shot"
    piped.write_bytes(PNG)
    with ReplayServer([]) as server:
        code = crow_here(*run_args(server, "--no-tools", "--no-session"), stdin=piped)
    assert code == 2 and server.requests == []
    assert "standard input is an image; pass the prompt as an argument" in capsys.readouterr().err


# Codex's -i/--image flag
def test_dash_i_attaches_an_image_and_refuses_a_text_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d.png").write_bytes(PNG)
    (tmp_path / "notes.txt").write_text("text")
    with ReplayServer([{"sse": text_sse("ok")}]) as server:
        flags = ("--no-tools", "--no-session")
        assert crow_here(*run_args(server, *flags, "-i", "d.png", "--image", "d.png", "Look")) == 0
        assert crow_here(*run_args(server, "--no-tools", "--no-session", "-i", "notes.txt", "Look")) == 2
    content = server.requests[0]["messages"][-1]["content"]
    assert [p["type"] for p in content] == ["text", "image_url", "image_url"]
    assert "[attached image: d.png]" in content[0]["text"]
    assert "cannot attach notes.txt with -i: not a PNG, JPEG, GIF or WebP image" in capsys.readouterr().err
    assert len(server.requests) == 1


# `crow run -i cut.png` (a real PNG's first 30 bytes) is refused in one line, and nothing is sent
def test_dash_i_refuses_a_truncated_image_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cut.png").write_bytes(PNG[:30])
    with ReplayServer([]) as server:
        assert crow_here(*run_args(server, "--no-tools", "--no-session", "-i", "cut.png", "Look")) == 2
    assert server.requests == []
    assert capsys.readouterr().err.strip().splitlines() == [
        "crow: error: cannot attach cut.png: a truncated PNG: it is 30 bytes and ends before its IHDR header"]


# binary stdin that is no image is refused, never put into the prompt (NULs and U+FFFD included)
def test_binary_stdin_that_is_no_image_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    piped = tmp_path / "blob"
    piped.write_bytes(b"\0\1\xff\xfe\x00binary")
    assert crow_here("run", "--base-url", "http://127.0.0.1:9/v1", "--api-key", "k", "what", stdin=piped) == 2
    assert "standard input is binary" in capsys.readouterr().err  # UTF-16 text has NULs too: tested above


# prompt files: `crow run -p NAME "ARGUMENTS"` as `/NAME ARGUMENTS` in crow chat
def test_dash_p_sends_a_prompt_file_with_its_arguments(tmp_path: Path, _isolated_home: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from crow_cli.sessions import SessionStore

    project, mine = tmp_path / ".crow/prompts", _isolated_home / ".config/crow/prompts"
    project.mkdir(parents=True)
    mine.mkdir(parents=True)
    (project / "review.md").write_text("Review $ARGUMENTS carefully.\n")
    (mine / "review.md").write_text("Hidden by the project's.")
    monkeypatch.chdir(tmp_path)
    with ReplayServer([{"sse": text_sse("ok")}]) as server:
        assert crow_here(*run_args(server, "--no-tools", "-p", "review", "src/app.py")) == 0
        err = capsys.readouterr().err
        assert crow_here(*run_args(server, "--no-tools", "-p", "review")) == 2
        missing = capsys.readouterr().err
        assert crow_here(*run_args(server, "--no-tools", "-p", "nope", "x")) == 2
        unknown = capsys.readouterr().err
    assert [r["messages"][-1] for r in server.requests] == [{"role": "user", "content": "Review src/app.py carefully."}]
    assert err.count(f"/review: the project's {project / 'review.md'} is used, not your {mine / 'review.md'}") == 1
    assert missing.splitlines()[1:] == ['crow: error: this prompt uses $ARGUMENTS and none were given '
                                        '(crow run -p review "TEXT"); nothing was sent']
    assert unknown == f"crow: error: no prompt file nope.md (looked in {project} and {mine})\n"
    store = SessionStore()
    try:
        assert [s.title for s in store.recent()] == ["-p review src/app.py"]  # as typed, not the file
    finally:
        store.close()


def test_prompt_file_sends_a_file_and_the_arguments_after_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "ask.md").write_text("Explain this error.")
    monkeypatch.chdir(tmp_path)
    with ReplayServer([{"sse": text_sse("ok")}, {"sse": text_sse("ok")}]) as server:
        code = crow_here(*run_args(server, "--no-tools", "--no-session", "--prompt-file", "ask.md", "exit 3"))
        assert code == 0
        piped = tmp_path / "piped"
        piped.write_text("it failed\n")
        code = crow_here(*run_args(server, "--no-tools", "--no-session", "--prompt-file", "ask.md"), stdin=piped)
        assert code == 0
        assert crow_here(*run_args(server, "--no-tools", "-p", "a/b", "x")) == 2
        assert crow_here(*run_args(server, "--no-tools", "-p", "a", "--prompt-file", "ask.md")) == 2
    assert [r["messages"][-1]["content"] for r in server.requests] == ["Explain this error.\n\nexit 3",
                                                                       "Explain this error.\n\nit failed"]
    err = capsys.readouterr().err.splitlines()
    assert err == ["crow: error: -p 'a/b': a prompt name is letters, digits, '_' and '-' (the file's stem)",
                   "crow: error: -p and --prompt-file cannot be combined"]
