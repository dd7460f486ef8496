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
