"""`crow agents list`: the agents a run here would offer, where each was found, and what was skipped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crow_cli.trust import TrustStore
from tests.support import crow_here


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_list_names_each_agent_where_it_was_found_and_what_was_skipped(
        tmp_path: Path, _isolated_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / ".git").mkdir()
    ours = write(tmp_path / ".claude/agents/reviewer.md",
                 "---\nname: reviewer\ndescription: Reviews code.\ntools: Read, Grep\nmodel: inherit\n---\nReview.\n")
    mine = write(_isolated_home / ".config/crow/agents/local.md",
                 "---\ndescription: Explores on the small server.\nprofile: small\n---\nExplore.\n")
    assert crow_here("agents", "list", "--workspace", str(tmp_path)) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [f"local  (user: {mine})", "    profile small; tools: every tool but task",
                                "    Explores on the small server."]
    assert err.splitlines() == [f"crow: warning: the agents in {ours.parent} are not used: this folder is not trusted"]

    TrustStore().set(tmp_path, True)
    assert crow_here("agents", "list", "--workspace", str(tmp_path), "--json") == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["name"], r["scope"], r["tools"], r["model"]) for r in rows] == [
        ("local", "user", None, None), ("reviewer", "project", ["Read", "Grep"], None)]


def test_no_agents_says_where_it_looked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert crow_here("agents", "list", "--workspace", str(tmp_path)) == 0
    assert "no agents found" in capsys.readouterr().out
