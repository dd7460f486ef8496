"""The chat's slash commands (`surfaces/chat/commands`), driven through the chat.

Properties guarded here:

- /help is made from the command table; /quit, /exit, /clear and /new; a lone `/` or `//x` is not sent;
- /resume and /fork continue a stored session (or a copy of it), show a message's text, not its parts,
  refuse a system prompt they would not use, and with `--no-session` read but never write the store;
- /compact summarises older exchanges (and leaves a conversation it would make longer); /undo removes the
  last exchange and restores the files crow's tools changed, `run_shell`'s too, asking before it overwrites a
  file changed outside crow (in-process and on a pty);
- /export never overwrites, takes a folder, a quoted path with spaces, refuses a FIFO;
- /instructions, /tools, /skills, prompt files as slash commands that never replace a built-in.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from crow_cli.config import Settings
from crow_cli.errors import ConfigError, SessionError
from crow_cli.export import exports_dir
from crow_cli.sessions import SessionStore
from crow_cli.surfaces.chat.app import ChatOptions
from crow_cli.surfaces.chat.commands import COMMANDS, help_text
from tests.replay_server import ReplayServer, text_stream
from tests.support import (
    ChatTerminal,
    authorless,
    chat,
    chat_options,
    chunk,
    sse,
    tool_calls_sse,
    tool_delta,
    wait_for,
)


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


async def test_resume_and_sessions_show_a_stored_title_without_bidi_or_controls(store: SessionStore) -> None:
    # U+202E and controls in a title are escaped in the "resumed session" line and /sessions
    old = store.create(model="test-model", cwd="/tmp")
    store.append(old.id, {"role": "user", "content": "fix \u202e\x1b[2Jit"})
    store.append(old.id, {"role": "assistant", "content": "Fixed."})
    output, _, _ = await chat([], f"/resume {old.id}\r/sessions\r/exit\r", store)
    assert "\x1b[2J" not in output
    assert f"resumed session {old.id} “fix \\u202e[2Jit”" in output
    assert "msgs  fix \\u202e[2Jit" in output


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
    assert "crow: error: /fork takes no argument" in output  # an argument is refused, not ignored
    assert store.recent() == [] and app.recorder.info is None  # no empty session left behind either
    output, _, _ = await chat([{"sse": text_stream("Hi.")}], "hello\r/fork\r/exit\r", store,
                              options=ChatOptions(session=False))
    assert "--no-session: nothing is stored, so there is no session to fork" in output
    assert store.recent() == []


async def test_resume_and_retry_show_the_text_of_a_message_with_an_image_not_its_parts(store: SessionStore) -> None:
    # content may be a list of parts: resuming and retrying show its text and the image's name, never the parts'
    # repr nor the image's data: URL
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
    # the resumed last exchange names the attached file (`[image: cat.png, 8 B]`), not its type
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
    # `crow chat --resume --system NEW` is refused, as `crow run -c --system NEW` is; the session's own prompt is
    # taken
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
    # `crow chat --no-session --resume ID` leaves the session's model as it was and gives the compactor no
    # recorder: a compaction stores no checkpoint
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


# With --no-session, a resumed session says nothing new is stored in it, and /undo says why there is nothing to
# undo
async def test_no_session_resume_says_nothing_new_is_stored_and_undo_says_why(store: SessionStore) -> None:
    old = store.create(model="m", base_url="http://x/v1", cwd="/tmp")
    for m in ({"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello."}):
        store.append(old.id, m)
    output, _, _ = await chat([], "/undo\r/exit\r", store, options=ChatOptions(session=False, resume=old.id))
    assert "--no-session: this session is read, but nothing new is stored in it" in output
    assert "--no-session records nothing, so there is nothing to undo" in output


async def test_no_session_resume_of_a_crashed_turn_closes_it_in_memory_only(store: SessionStore) -> None:
    # `--no-session --resume ID` closes a cut turn with "interrupted" results in memory only, never stored
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


def test_help_is_made_from_the_command_table() -> None:
    # /help and the dispatch come from one table, so no command (/quit) is missing from the help
    lines = help_text().splitlines()
    assert len(lines) == 2 + len(COMMANDS) and lines[0].startswith("Enter sends")
    for line, command in zip(lines[1:], COMMANDS, strict=False):
        assert line.startswith(f"/{command.name}") and line.endswith(command.doc)
    assert "/exit, /quit" in help_text()
    assert lines[-1].startswith("!COMMAND ") and "with your next message" in lines[-1]


async def test_quit_leaves(store: SessionStore) -> None:
    output, server, _ = await chat([], "/quit\r", store)
    assert "unknown command" not in output and server.requests == []


# /clear (Claude Code's and goose's word for a fresh conversation) starts a new session, as /new does
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
    # /export writes to the data folder, never into the repository chat works in, and says where
    exports = exports_dir()
    assert "Retried." in (exports / f"crow-session-{first.id}.md").read_text()
    assert json.loads((exports / f"crow-session-{first.id}.json").read_text())["session"]["id"] == first.id
    assert f"wrote {exports / f'crow-session-{first.id}.md'}" in output
    assert not list(tmp_path.glob("crow-session-*"))
    assert app.recorder.session_id != first.id


# /compact and /usage with the context window in chat
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
    # a /compact at a few tokens of 8,192 is announced as asked, not as "near the model's context window"
    assert "near the model's context window" not in output and "compacting as asked" in output
    assert "context: " in output and "/ 8,192 tokens" in output
    stored = store.messages(app.recorder.session_id)
    assert [m["content"] for m in stored if m["role"] == "user"] == ["one", "two", "three", "four"]
    assert len(store.checkpoints(app.recorder.session_id)) == 1


async def test_compact_that_would_make_the_conversation_longer_leaves_it(store: SessionStore) -> None:
    # a /compact whose summary is longer than what it replaces (one short exchange) leaves the conversation
    script = [{"sse": text_stream(f"answer {n}")} for n in range(3)]
    script += [{"sse": text_stream("SUMMARY: the user counted one and two, and was answered each time.")}]
    settings = Settings(model="test-model", api_key="sk-test", context_window=8192)
    output, _, app = await chat(script, "one\rtwo\rthree\r/compact\r/exit\r", store, settings=settings)
    assert "compacting would not make the conversation smaller" in output and "compacted the" not in output
    assert "1 earlier messages" not in output
    assert store.checkpoints(app.recorder.session_id) == []


# AGENTS.md in chat, and /instructions says where they came from
async def test_instructions_are_loaded_and_shown(store: SessionStore, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "AGENTS.md").write_text("Use tabs.")
    monkeypatch.chdir(tmp_path)
    output, server, _ = await chat([{"sse": text_stream("ok")}], "/instructions\rhi\r/exit\r", store)
    assert f"project: {tmp_path / 'AGENTS.md'} (9 bytes)" in output
    system = server.requests[0]["messages"][0]
    assert system["role"] == "system" and system["content"].endswith("Use tabs.")


async def test_skills_says_what_was_found_and_where_and_a_shadowed_skill_once(
        store: SessionStore, tmp_path: Path, _isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from crow_cli.trust import TrustStore

    (tmp_path / ".git").mkdir()
    TrustStore().set(tmp_path, True)
    ours, mine = tmp_path / ".crow/skills/forms/SKILL.md", _isolated_home / ".config/crow/skills/forms/SKILL.md"
    for path, said in ((ours, "Fill forms."), (mine, "My forms.")):
        path.parent.mkdir(parents=True)
        path.write_text(f"---\nname: forms\ndescription: {said}\n---\nBody.\n")
    monkeypatch.chdir(tmp_path)
    settings = Settings(model="test-model", api_key="sk-test", default_prompt=True)
    output, server, _ = await chat([{"sse": text_stream("ok")}], "/skills\rhi\r/exit\r", store, settings=settings)
    assert f"forms  project: {ours.resolve()}\n       Fill forms.\n       hides: {mine}" in output
    assert output.count(f"crow: warning: skill 'forms': the project's {ours.resolve()} is used, not your {mine}") == 1
    assert "- forms: Fill forms." in server.requests[0]["messages"][0]["content"]


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
    # a misnamed file is said not to be used, with why
    assert f"{prompts / 'with space.md'} is not used: a prompt file's name is letters" in output
    lines = output.splitlines()
    assert any(line.startswith("/review TEXT") and line.endswith("Review \\u001b[2Jcarefully") for line in lines)
    assert any(line.startswith("/hello ") and line.endswith("Say hello.") for line in lines)
    assert "/resume [ID]" in output  # the built-in /help still
    assert f"crow: error: prompt file {str(prompts / 'bad.md')!r} cannot be read: it is not UTF-8 text" in output
    assert "\x1b" not in output
    assert "unknown command /nope; /help lists the commands" in output
    # the title is what was typed, not the file's text
    assert store.recent()[0].title == "/review src/app.py"


async def test_a_prompt_file_never_replaces_a_built_in_command(store: SessionStore, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".crow/prompts").mkdir(parents=True)
    (tmp_path / ".crow/prompts/new.md").write_text("Never sent.")
    monkeypatch.chdir(tmp_path)
    output, server, _ = await chat([], "/new\r/new\r/exit\r", store)
    assert output.count(f"{tmp_path / '.crow/prompts/new.md'} is not used: /new is a built-in command") == 1
    assert output.count("new session started") == 2 and server.requests == []


# /undo removes the last exchange and restores the files crow's file tools changed
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
    # `crow chat --no-session` then /export writes the turns so far (nothing only before the first), and /export
    # writes outside the current folder
    monkeypatch.chdir(tmp_path)
    elsewhere = tmp_path / "out" / "talk.json"
    elsewhere.parent.mkdir()
    (tmp_path / "afile").write_text("")
    # `/export jsn` is an unknown format, not a file named `jsn`
    keys = (f"/export\rhello\r/export\r/export {elsewhere}\r/export md {tmp_path / 'afile' / 'x.md'}\r"
            f"/export md {tmp_path / 'new' / 'sub' / 'x.md'}\r/export jsn\r/exit\r")
    output, _, _ = await chat([{"sse": text_stream("Hi.")}], keys, store, options=ChatOptions(session=False))
    assert "nothing to export yet" in output.split("Hi.")[0]
    (unsaved,) = exports_dir().glob("crow-session-unsaved-*.md")
    assert "Hi." in unsaved.read_text()
    assert authorless(json.loads(elsewhere.read_text())["messages"][-1]) == {"role": "assistant", "content": "Hi."}
    assert "crow: error: cannot write" in output and store.recent() == []
    # a missing folder is refused, as `cp` does, not made
    assert f"crow: error: cannot write {tmp_path / 'new' / 'sub' / 'x.md'}: no such folder" in output
    assert not (tmp_path / "new").exists()
    assert "unknown format 'jsn'" in output and not (tmp_path / "jsn").exists()


# /export never overwrites a file (`/export /etc/passwd`); `/export md json` is one format too many, not a file
# `json`; `/export DIR` writes into the folder; the transcript has the session's title as it is now
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
    # `/export "my notes.md"` takes the quoted path with its space, not '"my' as a format
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
    # /tools lists the tools in aligned columns
    output, _, _ = await chat([], "/tools\r/exit\r", store, options=chat_options(tools_dirs=(str(tools_dir),)))
    lines = [line for line in output.splitlines() if line.startswith(("read_file ", "run_shell ", "guarded "))]
    assert len(lines) == 3 and len({line.index(line.split()[1]) for line in lines}) == 1, lines


async def test_export_to_a_fifo_is_refused_and_the_chat_goes_on(store: SessionStore, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # `/export pipe` (a FIFO) is refused, so it never blocks the chat; the export is private (0600) as the session
    # store is

    monkeypatch.chdir(tmp_path)
    os.mkfifo(tmp_path / "pipe")
    keys = "hello\r/export md pipe\r/export md talk.md\r/exit\r"
    output, _, _ = await chat([{"sse": text_stream("Hi.")}], keys, store, options=ChatOptions(session=False))
    assert "crow: error: cannot write pipe: a FIFO (named pipe)" in output
    assert "Hi." in (tmp_path / "talk.md").read_text()
    assert (tmp_path / "talk.md").stat().st_mode & 0o777 == 0o600


async def test_a_slash_alone_or_a_double_slash_is_not_sent(store: SessionStore) -> None:
    # `/` alone and `//x` are unknown commands, never sent to the model as messages
    output, server, _ = await chat([{"sse": text_stream("Hi.")}], "/\r//x\rhello\r/exit\r", store)
    assert "unknown command /; /help lists the commands" in output
    assert "unknown command //x; /help lists the commands" in output
    assert [m["content"] for m in server.requests[0]["messages"] if m["role"] == "user"] == ["hello"]


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


# /approval and Shift+Tab: the approval mode changes inside a chat

def _write_turns(*names: str) -> list[dict]:
    script = []
    for n, name in enumerate(names):
        script += [{"sse": tool_calls_sse((f"call_{n}", "write_file", {"path": name, "content": name}))},
                   {"sse": text_stream(f"Wrote {name}.")}]
    return script


def test_approval_auto_edit_in_a_terminal_chat_stops_the_write_question_and_tells_the_model(tmp_path: Path) -> None:
    base = ["--api-key", "sk-test", "--model", "test-model", "--sandbox", "off"]
    with ReplayServer(_write_turns("a.txt", "b.txt")) as server, \
            ChatTerminal(["--base-url", server.base_url, *base], cwd=tmp_path) as term:
        term.expect("ask ›")  # the prompt line shows the mode in force
        term.send("write a\r")
        term.expect("Allow write_file?")
        term.send("y\r")
        term.expect("Wrote a.txt.")
        term.send("/approval auto-edit\r")
        term.expect("approval mode: auto-edit")
        term.expect("auto-edit ›")
        term.send("write b\r")
        term.expect("Wrote b.txt.")
        term.expect("auto-edit ›")
        term.send("\x04")
        assert term.wait() == 0
        screen = term.screen()
    asked, after = screen.split("approval mode: auto-edit", 1)
    assert "Allow write_file?" in asked and "Allow write_file?" not in after  # the second write was not asked about
    assert (tmp_path / "a.txt").read_text() == "a.txt" and (tmp_path / "b.txt").read_text() == "b.txt"
    first, second, third, _ = server.requests
    assert "approval mode is now" not in json.dumps(first["messages"])
    # told in the next request, after the message (merged into it on the wire: the prefix stays as it was sent)
    assert third["messages"][-1]["content"] == (
        "write b\n\n[crow: the approval mode is now auto-edit: file changes in the workspace apply without asking; "
        "commands are approved by the user]")
    assert third["messages"][:len(second["messages"])] == second["messages"]


def test_shift_tab_cycles_the_modes_on_the_prompt_line_and_plan_refuses_a_write(tmp_path: Path) -> None:
    base = ["--api-key", "sk-test", "--model", "test-model", "--sandbox", "off"]
    with ReplayServer(_write_turns("a.txt")) as server, \
            ChatTerminal(["--base-url", server.base_url, *base], cwd=tmp_path) as term:
        term.expect("ask ›")
        term.send("\x1b[Z")  # Shift+Tab: the prompt line is redrawn (only what changed is written)
        wait_for(lambda: any(row.startswith("auto-edit ›") for row in term.display()))
        term.send("\x1b[Z")
        wait_for(lambda: any(row.startswith("plan ›") for row in term.display()))
        term.send("write a\r")
        term.expect("Wrote a.txt.")
        term.send("/approval\r")  # no mode: a picker, the mode in force chosen
        term.expect("Approval mode")
        term.send("\x1b[A")
        term.send("\r")  # the one above plan
        term.expect("approval mode: read-only")
        term.expect("›")  # the next prompt is up: a Ctrl-D sent before it may be lost
        term.send("\x04")
        assert term.wait() == 0
        screen = term.screen()
    assert "Allow write_file?" not in screen and "the session is planning" in screen
    assert not (tmp_path / "a.txt").exists()
    sent = server.requests[0]["messages"][-1]["content"]
    assert sent.startswith("write a\n\n[crow: the approval mode is now plan: you are planning")


async def test_approval_refuses_an_unknown_mode_and_keeps_the_one_in_force(store: SessionStore) -> None:
    output, server, app = await chat([], "/approval sometimes\r/approval read-only\r/exit\r", store)
    text = " ".join(output.split())
    assert "unknown approval mode 'sometimes' (choose from ask, auto-edit, yolo, read-only, plan)" in text
    assert text.index("unknown approval mode") < text.index("approval mode: read-only")
    assert app.approver.policy.mode == "read-only" and server.requests == []


# /rewind: the files crow's tools changed, `run_shell`'s too, and the conversation

def test_rewind_restores_what_a_command_changed_and_a_conversation_rewind_leaves_files(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("old line\n")
    sed = {"command": "sed -i 's/old/new/' a.txt"}
    script = [{"sse": tool_calls_sse(("c1", "run_shell", sed))}, {"sse": text_stream("edited once")},
              {"sse": tool_calls_sse(("c2", "run_shell", sed))}, {"sse": text_stream("edited again")}]
    with ReplayServer(script) as server:
        args = ["--base-url", server.base_url, "--api-key", "sk-test", "--model", "test-model", "--yes",
                "--sandbox", "off"]
        with ChatTerminal(args, cwd=tmp_path) as term:
            term.expect("›")
            term.send("fix a.txt\r")
            term.expect("edited once")
            assert (tmp_path / "a.txt").read_text() == "new line\n"
            term.expect("›")
            term.send("/rewind\r")
            term.expect("Rewind to before which prompt?")
            term.send("\r")  # the last prompt, chosen
            term.expect("Rewind what?")
            term.send("\x1b[B")
            term.send("\x1b[B")
            term.send("\r")  # code only: the third choice
            term.expect("rewound")
            assert (tmp_path / "a.txt").read_text() == "old line\n"
            term.expect("›")
            term.send("fix it again\r")
            term.expect("edited again")
            assert (tmp_path / "a.txt").read_text() == "new line\n"
            term.expect("›")
            term.send("/rewind 2 conversation\r")
            term.expect("rewound")
            term.expect("›")  # the next prompt is up: a Ctrl-D sent before it can be lost
            screen = term.screen()
            term.send("\x04")
            assert term.wait() == 0
            err = term.stderr()
    assert "Traceback" not in err, err
    first = screen.split("rewound")[0]
    assert "restored a.txt" in first and "rewind (code)" in first
    assert (tmp_path / "a.txt").read_text() == "new line\n"  # a conversation rewind leaves the files as they are
    with SessionStore() as store:
        (info,) = store.recent()
        assert [m["content"] for m in store.messages(info.id) if m["role"] == "user"] == ["fix a.txt"]
        assert info.title == "fix a.txt"


def test_rewind_numbers_each_prompt_once_in_the_list_and_after_ctrl_c(tmp_path: Path) -> None:
    # each prompt is numbered once ("1. fix a.txt", not the picker's number and the label's)
    with ReplayServer([{"sse": text_stream("done")}]) as server:
        args = ["--base-url", server.base_url, "--api-key", "sk-test", "--model", "test-model", "--no-tools"]
        with ChatTerminal(args, cwd=tmp_path) as term:
            term.expect("›")
            term.send("fix a.txt\r")
            term.expect("done")
            term.expect("›")
            term.send("/rewind\r")
            term.expect("Rewind to before which prompt?")
            term.expect("1. fix a.txt")
            listed = term.screen()
            term.send("\x03")  # leaves the list: the prompts are listed with the numbers /rewind N takes
            term.expect("usage: /rewind [N]")
            after = term.screen()
            term.send("\x04")
            assert term.wait() == 0
    assert "1. 1." not in listed
    assert "\n1. fix a.txt" in after[after.rindex("Rewind to before"):]


async def test_rewind_and_resume_count_one_message_in_the_singular(store: SessionStore) -> None:
    # one message is singular: never "the conversation is as it was before that prompt (1 messages)"
    settings = Settings(model="test-model", api_key="sk-test", system="be brief",
                        sandbox=os.environ.get("CROW_SANDBOX", "workspace-write"))  # type: ignore[arg-type]
    output, _, app = await chat([{"sse": text_stream("Hi.")}], "hello\r/rewind 1 conversation\r/exit\r", store,
                                settings=settings)
    assert "before that prompt (1 message)" in output
    assert app.recorder is not None and app.recorder.session_id is not None
    output, _, _ = await chat([], f"/resume {app.recorder.session_id}\r/exit\r", store)
    assert "” (1 message)" in output


def test_rewind_choices_fit_a_60_column_terminal() -> None:
    # each choice fits 60 columns, none cut as "the files and the conversat"
    from crow_cli.surfaces.chat.commands import REWIND_MODES

    row = "   >  1. "  # prompt-toolkit's ChoiceInput before each label
    assert all(len(row + label) <= 60 for _, label in REWIND_MODES), REWIND_MODES


async def test_rewind_of_both_to_the_first_prompt_clears_the_title(store: SessionStore, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    script = [{"sse": tool_calls_sse(("c1", "run_shell", {"command": "echo made > made.txt"}))},
              {"sse": text_stream("made it")}]
    output, _, app = await chat(script, "make a file\r/rewind 1 both\r/exit\r", store,
                                options=chat_options(yes=True))
    assert "removed made.txt" in output and not (tmp_path / "made.txt").exists()
    info = store.get(app.recorder.session_id)
    assert store.messages(info.id) == [] and info.title == ""  # the prompt it came from is gone


async def test_a_read_only_command_takes_no_snapshot(store: SessionStore, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    script = [{"sse": tool_calls_sse(("c1", "run_shell", {"command": "ls"}),
                                     ("c2", "run_shell", {"command": "touch t.txt"}))},
              {"sse": text_stream("done")}]
    _, _, app = await chat(script, "look and touch\r/exit\r", store, options=chat_options(yes=True))
    kinds = [s.kind for s in store.snapshots(app.recorder.session_id)]
    assert kinds == ["before", "after"]  # the `touch` only


# /undo is a rewind of the last exchange, code and conversation: what `run_shell` changed (`sed -i`) is restored
# from the workspace's snapshots, not listed as "not undoable"
def test_undo_restores_what_a_command_changed_and_removes_the_exchange(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("old line\n")
    script = [{"sse": text_stream("hello")},
              {"sse": tool_calls_sse(("c1", "run_shell", {"command": "sed -i 's/old/new/' a.txt"}))},
              {"sse": text_stream("edited")}]
    with ReplayServer(script) as server:
        args = ["--base-url", server.base_url, "--api-key", "sk-test", "--model", "test-model", "--yes",
                "--sandbox", "off"]
        with ChatTerminal(args, cwd=tmp_path) as term:
            term.expect("›")
            term.send("hi\r")
            term.expect("hello")
            term.expect("›")
            term.send("fix a.txt\r")
            term.expect("edited")
            assert (tmp_path / "a.txt").read_text() == "new line\n"
            term.expect("›")
            term.send("/undo\r")
            term.expect("undone")
            term.expect("›")  # the next prompt is up: a Ctrl-D sent before it can be lost
            screen = term.screen()
            term.send("\x04")
            assert term.wait() == 0
            err = term.stderr()
    assert "Traceback" not in err, err
    said = "".join(screen[screen.index("/undo"):].split())  # a long path wraps at the terminal's width
    assert f"restores{tmp_path / 'a.txt'}" in said and said.index("restores") < said.index("undone")
    assert "not undoable" not in said
    assert (tmp_path / "a.txt").read_text() == "old line\n"
    with SessionStore() as store:
        (info,) = store.recent()
        assert [m["content"] for m in store.messages(info.id)] == ["hi", "hello"]


# /undo names a file changed outside crow since the exchange and overwrites it only when the person says yes
def test_undo_asks_before_it_overwrites_a_file_changed_outside_crow(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("old line\n")
    script = [{"sse": tool_calls_sse(("c1", "run_shell", {"command": "sed -i 's/old/new/' a.txt"}))},
              {"sse": text_stream("edited")}]
    with ReplayServer(script) as server:
        args = ["--base-url", server.base_url, "--api-key", "sk-test", "--model", "test-model", "--yes",
                "--sandbox", "off"]
        with ChatTerminal(args, cwd=tmp_path) as term:
            term.expect("›")
            term.send("fix a.txt\r")
            term.expect("edited")
            term.expect("›")
            (tmp_path / "a.txt").write_text("the user's line\n")
            term.send("/undo\r")
            term.expect("Overwrite them with their earlier content too?")
            term.send("y\r")
            term.expect("undone")
            term.expect("›")
            screen = term.screen()
            term.send("\x04")
            assert term.wait() == 0
    said = "".join(screen[screen.index("/undo"):].split())  # a long path wraps at the terminal's width
    assert f"changedoutsidecrowsince:{tmp_path / 'a.txt'}" in said
    assert (tmp_path / "a.txt").read_text() == "old line\n"


# /undo after a `!COMMAND` removes the model's exchange and keeps the command's note
async def test_undo_after_a_typed_command_removes_the_exchange_and_keeps_the_note(
        store: SessionStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    output, _, app = await chat([{"sse": text_stream("Hello.")}], "hi\r!echo kept\r/undo\r/exit\r", store)
    assert "undone" in output
    info = store.get(app.recorder.session_id)
    assert store.messages(info.id) == [{"role": "user", "content": "I ran a command in the shell:\n$ echo kept\n"
                                                                   "[exit code 0]\nkept"}]
    assert info.title == "!echo kept"  # not the prompt that is gone
