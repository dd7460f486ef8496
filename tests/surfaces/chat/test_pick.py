"""The chat's pickers (`surfaces/chat/pick`): sessions to resume and the server's models, on a real terminal (a
pty) against a replay server, and the rows they are made of.

Properties guarded here:

- `crow chat --resume` and `/resume` without an id list this folder's sessions first (folder, age, message count,
  title), leave out the session the chat is in (the only one stored: said, nothing resumed), and continue the one
  picked; stored titles reach the terminal without their control characters;
- `/model` without a name lists the server's models (`/models`, asked once per chat) and switches to the one
  picked (its name shown without control characters, in the footer too); `/model NAME` of a model the server
  does not list says so in one line and switches anyway;
- with no terminal, `--resume` continues this folder's latest session (as before the list) and `/model` lists
  the models.
"""

from __future__ import annotations

from pathlib import Path

from crow_cli.history import user_message
from crow_cli.sessions import SessionStore
from crow_cli.surfaces.chat.pick import age, model_options, session_options
from tests.replay_server import ReplayServer, text_stream
from tests.support import ChatTerminal, chat, crow


def _stored(store: SessionStore, folder: Path, prompt: str, answer: str) -> str:
    info = store.create(model="test-model", cwd=str(folder))
    store.append(info.id, user_message(prompt))
    store.append(info.id, {"role": "assistant", "content": answer})
    return info.id


def _args(base_url: str) -> list[str]:
    return ["--base-url", base_url, "--api-key", "sk-test", "--model", "test-model", "--no-tools"]


def test_resume_without_an_id_lists_this_folders_sessions_first_and_continues_the_picked_one(tmp_path: Path) -> None:
    proj, other = (tmp_path / "proj").resolve(), (tmp_path / "other").resolve()
    proj.mkdir()
    other.mkdir()
    with SessionStore() as store:
        here = _stored(store, proj, "fix the parser", "Parser fixed.")
        there = _stored(store, other, "tune\x07 the cache", "Cache tuned.")  # the most recent, but elsewhere
    script = [{"sse": text_stream("Still fixed.")}, {"sse": text_stream("Still tuned.")}]
    with ReplayServer(script) as server, ChatTerminal(["--resume", *_args(server.base_url)], cwd=proj) as term:
        term.expect("Resume which session?")
        term.expect("fix the parser")  # this folder's first
        term.expect("tune the cache")
        term.send("\r")  # the first row is chosen
        term.expect(f"resumed session {here}")
        term.expect("›")
        term.send("again?\r")
        term.expect("Still fixed.")
        term.expect("›")
        term.send("/resume\r")  # the list again, without the session the chat is in
        term.expect("Resume which session?")
        term.expect("2 messages  tune the cache  ")
        shown_list = term.screen()[term.screen().rindex("Resume which session?"):]
        term.send("\r")
        term.expect(f"resumed session {there}")
        term.expect("›")
        term.send("and now?\r")
        term.expect("Still tuned.")
        term.expect("›")
        term.send("\x04")
        assert term.wait() == 0
        screen = term.screen()
    assert "fix the parser" not in shown_list
    assert "\x07" not in screen  # a stored title is shown without its control characters
    first, second = server.requests
    assert [m["content"] for m in first["messages"]] == ["fix the parser", "Parser fixed.", "again?"]
    assert [m["content"] for m in second["messages"]] == ["tune\x07 the cache", "Cache tuned.", "and now?"]


def test_a_picked_session_continues_with_its_model_unless_model_is_given(tmp_path: Path) -> None:
    # without --model the picked session goes on with its own model, not the server's first
    with SessionStore() as store:
        sid = _stored(store, tmp_path.resolve(), "fix the parser", "Parser fixed.")
        store.set_model(sid, "gamma", "")
    args = ["--base-url", "", "--api-key", "sk-test", "--no-tools", "--resume"]
    with ReplayServer([{"sse": text_stream("Still fixed.")}, {"sse": text_stream("Named.")}],
                      models=["alpha", "gamma"]) as server:
        args[1] = server.base_url
        for extra, prompt in (([], "again?"), (["--model", "alpha"], "and now?")):
            with ChatTerminal([*args, *extra], cwd=tmp_path, env={"CROW_MODEL": ""}) as term:
                term.expect("Resume which session?")
                term.send("\r")
                term.expect(f"resumed session {sid}")
                term.expect("›")
                term.send(f"{prompt}\r")
                term.expect("Still fixed." if not extra else "Named.")
                term.expect("›")
                term.send("\x04")
                assert term.wait() == 0
    assert [r["model"] for r in server.requests] == ["gamma", "alpha"]


def test_ctrl_c_at_the_list_of_sessions_starts_nothing(tmp_path: Path) -> None:
    with SessionStore() as store:
        _stored(store, tmp_path.resolve(), "fix the parser", "Parser fixed.")
    with ReplayServer([]) as server, ChatTerminal(["--resume", *_args(server.base_url)], cwd=tmp_path) as term:
        term.expect("Resume which session?")
        term.send("\x03")
        term.expect("no session picked (crow chat --resume ID continues one)")
        assert term.wait() == 0
    with SessionStore() as store:
        assert len(store.recent()) == 1


def test_session_rows_put_this_folder_first_and_say_folder_age_count_and_title(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "s.db") as store:
        elsewhere = _stored(store, Path.home() / "web", "style\x1b[2J it", "Styled.")
        mine = _stored(store, tmp_path, "fix\u202e it", "Fixed.")
        newest = _stored(store, Path("/srv/api"), "serve it", "Served.")
        now = store.get(newest).updated_at + 7200
        rows = session_options(store, str(tmp_path), now=now)
        assert [sid for sid, _ in rows] == [mine, newest, elsewhere]
        label = dict(rows)
        assert label[mine].split() == ["2", "h", "ago", "2", "messages", "fix\\u202e", "it", str(tmp_path)]
        assert label[elsewhere].split()[-1] == "~/web" and "2 messages  style[2J it " in label[elsewhere]
        assert [sid for sid, _ in session_options(store, str(tmp_path), leave_out=mine)] == [newest, elsewhere]
    assert [age(s) for s in (5, 300, 7200, 86400, 3 * 86400)] == [
        "just now", "5 min ago", "2 h ago", "1 day ago", "3 days ago"]


def test_model_rows_mark_the_model_in_use_and_show_no_control_characters() -> None:
    assert model_options(["a", "b\x1b]0;x\x07"], "a") == [("a", "a  (in use)"), ("b\x1b]0;x\x07", "b]0;x")]


def test_model_rows_are_bounded_and_keep_the_model_in_use() -> None:
    # the rows are bounded, so a server listing 3000 models does not make each key redraw the whole list
    served = [f"m{i}" for i in range(10)]
    assert [name for name, _ in model_options(served, "m1", limit=3)] == ["m0", "m1", "m2"]
    assert [name for name, _ in model_options(served, "m7", limit=3)] == ["m7", "m0", "m1"]
    assert len(model_options(served, "x")) == 10


async def test_a_model_name_reaches_the_terminal_with_bidi_characters_escaped(store: SessionStore) -> None:
    # a served name holding U+202E is escaped, so it cannot reorder the "model: …" line
    output, server, _ = await chat([{"sse": text_stream("Hi.")}], "/model gam\u202ema\rhello\r/exit\r", store)
    assert server.requests[0]["model"] == "gam\u202ema"
    assert "\u202e" not in output
    assert "model: gam\\u202ema\n" in output and "· gam\\u202ema ·" in output  # the footer too


def test_model_without_a_name_lists_the_servers_models_and_an_unlisted_name_is_warned_about(tmp_path: Path) -> None:
    script = [{"sse": text_stream("Big answer.")}, {"sse": text_stream("Unlisted answer.")},
              {"sse": text_stream("Odd answer.")}]
    models = ["test-model", "big-model", "odd\x07-model"]
    with ReplayServer(script, models=models) as server, ChatTerminal(_args(server.base_url), cwd=tmp_path) as term:
        term.expect("›")
        term.send("/model\r")
        term.expect("Switch to which model?")
        term.expect("test-model  (in use)")
        term.expect("big-model")
        term.expect("odd-model")  # a served name reaches the terminal without its control characters
        term.send("\x1b[B")  # Down: the one after the model in use
        term.send("\r")
        term.expect("model: big-model")
        term.expect("›")
        term.send("hello\r")
        term.expect("Big answer.")
        term.expect("›")
        term.send("/model nosuch-model\r")
        term.expect("crow: warning: the server does not list 'nosuch-model'; switching anyway (/model lists its "
                    "models)")
        term.expect("model: nosuch-model")
        term.expect("›")
        term.send("again\r")
        term.expect("Unlisted answer.")
        term.expect("›")
        term.send("/model big-model\r")  # listed: no warning
        term.expect("model: big-model")
        term.expect("›")
        term.send("/model\r")
        term.expect("2. big-model  (in use)")
        term.send("\x1b[B")
        term.send("\r")
        term.expect("model: odd-model")
        term.expect("›")
        term.send("odd?\r")
        term.expect("Odd answer.")
        term.expect("· odd-model ·")  # the footer: the served name without its control characters
        term.expect("›")
        screen = term.screen()
        term.send("\x04")
        assert term.wait() == 0
    assert [r["model"] for r in server.requests] == ["big-model", "nosuch-model", "odd\x07-model"]
    assert "\x07" not in screen
    assert screen.count("does not list") == 1


def test_piped_resume_continues_this_folders_latest_and_piped_model_lists_the_models_once(tmp_path: Path) -> None:
    with SessionStore() as store:
        here = _stored(store, tmp_path.resolve(), "fix the parser", "Parser fixed.")
        _stored(store, tmp_path.parent.resolve(), "elsewhere", "Not here.")  # newer, another folder
    with ReplayServer([], models=["test-model", "big-model"]) as server:
        ran = crow("chat", "--resume", *_args(server.base_url), input="/model\n/model\n/exit\n", cwd=tmp_path)
        lists = server.model_lists
    assert ran.returncode == 0, ran.stderr
    assert f"resumed session {here}" in ran.stdout  # no terminal to pick on: this folder's latest, as before
    assert ran.stdout.count("the server's models (/model NAME switches to one):\n  test-model  (in use)\n"
                            "  big-model\n") == 2
    assert lists == 1  # asked once per chat


def test_piped_resume_in_a_chat_continues_another_session_not_its_own(tmp_path: Path) -> None:
    # with piped input, `/resume` continues another session, not the one the chat is in (this folder's latest)
    with SessionStore() as store:
        older = _stored(store, tmp_path.resolve(), "fix the parser", "Parser fixed.")
    with ReplayServer([{"sse": text_stream("Hi.")}, {"sse": text_stream("Hi again.")}]) as server:
        ran = crow("chat", *_args(server.base_url), input="hello\n/resume\n/resume\n", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    with SessionStore() as store:
        own = next(s.id for s in store.recent() if s.id != older)
    assert ran.stdout.count(f"resumed session {older}") == 1 and ran.stdout.count(f"resumed session {own}") == 1


async def test_resume_in_the_only_session_says_there_is_no_other(store: SessionStore) -> None:
    output, _, app = await chat([{"sse": text_stream("Hi.")}], "hello\r/resume\r/exit\r", store)
    assert "no other session to continue" in output and "resumed session" not in output
    assert app.recorder is not None and len(store.recent()) == 1
