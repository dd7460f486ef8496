"""`crow sessions fork`: crow's app in this process (`crow_here`), the runs around it as `crow run` runs them
(`run_here`) against the replay server, all on the isolated home's session store."""

from __future__ import annotations

from pathlib import Path

import pytest

from crow_cli.sessions import SessionStore
from tests.replay_server import text_stream
from tests.support import authorless, crow_here, run_here


async def test_fork_prints_the_new_id_and_a_run_continues_the_fork(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    first = await run_here([{"sse": text_stream("Noted: ZEBRA-42.")}], "remember ZEBRA-42", cwd=tmp_path,
                           flags={"system": "be brief"}, system="be brief")
    assert first.code == 0, first.stderr
    with SessionStore() as store:
        original = store.latest()
        stored = store.messages(original.id)
    capsys.readouterr()

    assert crow_here("sessions", "fork", original.id[:3]) == 0  # a prefix, as the other sessions commands take
    out, err = capsys.readouterr()
    new_id = out.strip()
    assert len(new_id) == 6 and new_id != original.id
    assert err == f"forked {original.id} (remember ZEBRA-42, 3 messages) into {new_id}\n"

    ran = await run_here([{"sse": text_stream("It was ZEBRA-42.")}], "what was it?", cwd=tmp_path,
                         session_id=new_id)  # `crow run --session NEWID`
    assert ran.code == 0, ran.stderr
    assert ran.requests[0]["messages"] == [*authorless(stored), {"role": "user", "content": "what was it?"}]
    ran = await run_here([{"sse": text_stream("Still ZEBRA-42.")}], "sure?", cwd=tmp_path,
                         continue_last=True)  # `crow run -c`: the fork is this folder's latest session
    assert ran.code == 0, ran.stderr
    assert ran.requests[0]["messages"][-2:] == [{"role": "assistant", "content": "It was ZEBRA-42."},
                                                {"role": "user", "content": "sure?"}]
    with SessionStore() as store:
        assert store.messages(original.id) == stored  # the first direction is kept as it was
        fork = store.get(new_id)
        assert (fork.title, fork.messages) == ("remember ZEBRA-42 (fork)", 7)


def test_fork_of_an_unknown_or_ambiguous_id_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with SessionStore() as store:
        ids = [store.create().id for _ in range(40)]
    shared = next(c for c in "23456789abcdefghjkmnpqrstuvwxyz" if sum(i.startswith(c) for i in ids) > 1)
    capsys.readouterr()
    assert crow_here("sessions", "fork", "nosuch") == 1
    assert capsys.readouterr() == ("", "crow: error: no session 'nosuch' (crow sessions list shows them)\n")
    assert crow_here("sessions", "fork", shared) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"crow: error: session id {shared!r} is ambiguous: ")
    assert len(err.splitlines()) == 1
    with SessionStore() as store:
        assert len(store.recent(0)) == 40  # nothing was made


def _listed(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[list[str], str]:
    capsys.readouterr()
    assert crow_here("sessions", "list", *args) == 0
    out, err = capsys.readouterr()
    return out.splitlines(), err


def test_list_shows_the_folder_each_session_was_started_in(capsys: pytest.CaptureFixture[str]) -> None:
    home = Path.home()
    with SessionStore() as store:
        inside = store.create(model="m", cwd=str(home / "src" / "app")).id
        outside = store.create(model="m", cwd="/srv/elsewhere").id
    rows, _ = _listed(capsys)
    assert rows[0].split() == ["ID", "UPDATED", "MESSAGES", "MODEL", "FOLDER", "TITLE"]
    folder = {row.split()[0]: row.split()[6] for row in rows[1:]}  # UPDATED is two words
    assert folder == {inside: "~/src/app", outside: "/srv/elsewhere"}  # the home folder as `~`
    assert rows[0].index("FOLDER") == rows[1].index(folder[rows[1].split()[0]])  # under its header


def test_list_here_shows_only_this_folders_sessions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with SessionStore() as store:
        mine = [store.create(model="m", cwd=str(tmp_path / "a")).id for _ in range(2)]
        store.create(model="m", cwd=str(tmp_path / "b"))
    monkeypatch.chdir(tmp_path / "a")
    rows, _ = _listed(capsys, "--here")
    assert sorted(row.split()[0] for row in rows[1:]) == sorted(mine)
    rows, err = _listed(capsys, "--here", "-n", "1")
    assert len(rows) == 2 and "--limit 0" in err  # the header and the newest; more are said to be there
    monkeypatch.chdir(tmp_path)
    rows, err = _listed(capsys, "--here")
    assert rows == [] and err == "no sessions in this folder (crow sessions list shows every session)\n"
    assert len(_listed(capsys)[0]) == 1 + 3  # without --here: every folder's


def test_list_on_a_terminal_shows_a_served_model_name_without_its_controls(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # a model name the server served (picked with /model) reaches the terminal without its ESC and controls
    import sys

    with SessionStore() as store:
        sid = store.create(model="be\x1b[31mta\x07\u202e", cwd="/srv/x").id
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    rows, _ = _listed(capsys)
    assert rows[1].split()[5] == "be\\u001b[31mta\\u0007\\u202e" and rows[1].startswith(sid)
    assert rows[0].index("FOLDER") == rows[1].index("/srv/x")  # the column is as wide as what is shown


def test_list_on_a_terminal_keeps_a_folder_with_a_newline_on_its_row(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # a newline in a folder name keeps the FOLDER column on its row, not splitting it in two
    import sys

    with SessionStore() as store:
        sid = store.create(model="m", cwd="/srv/a\nb\tc").id
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    rows, _ = _listed(capsys)
    assert len(rows) == 2 and rows[1].startswith(sid) and "/srv/a\\nb\\tc" in rows[1]
