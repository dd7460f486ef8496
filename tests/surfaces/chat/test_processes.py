"""Chat's `/ps`: the commands kept running in the background, listed and stopped; the rest stopped at the end."""

from __future__ import annotations

from pathlib import Path

import pytest

from crow_cli.sessions import SessionStore
from tests.support import chat, chat_options, script


async def test_ps_lists_background_commands_stops_one_and_the_chat_stops_the_rest(
        store: SessionStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    turns = [*script([("c1", "run_shell", {"command": "sleep 600", "background": True})], final="Started."),
             *script([("c2", "run_shell", {"command": "sleep 700", "background": True})], final="Again.")]
    output, _, _ = await chat(turns, "start\r/ps\r/ps stop bg1\r/ps stop bg7\r/ps\rmore\r/exit\r", store,
                              options=chat_options(yes=True))
    lines = [" ".join(line.split()) for line in output.splitlines()]
    assert any(line.startswith("bg1 running ") and line.endswith(" sleep 600") for line in lines), output
    assert any(line.startswith("bg1: stopped after ") for line in lines), output
    assert "no background command 'bg7' (there are: bg1)" in output
    assert any(line.startswith("bg1 stopped ") and line.endswith(" sleep 600") for line in lines), output
    # leaving the chat stops what still runs, one line each
    assert any(line.startswith("crow: stopped background command bg2 after ") and line.endswith(": sleep 700")
               for line in lines), output
