"""`crow skills list`: what a run here would offer, where each skill was found, and what was skipped or hidden."""

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


def test_the_list_names_each_skill_its_scope_and_file_what_it_hides_and_what_was_skipped(
        tmp_path: Path, _isolated_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / ".git").mkdir()
    TrustStore().set(tmp_path, True)
    ours = write(tmp_path / ".claude/skills/review/SKILL.md",
                 "---\nname: review\ndescription: |\n  Review a change.\n  Second line.\n"
                 "allowed-tools: [Read, Grep]\n---\n")
    mine = write(_isolated_home / ".config/crow/skills/review/SKILL.md", "---\nname: review\ndescription: Mine.\n---\n")
    write(_isolated_home / ".agents/skills/tidy/SKILL.md", "---\nname: tidy\ndescription: Tidy up.\n---\n")
    bad = write(tmp_path / ".crow/skills/bad/SKILL.md", "---\nname: bad\n---\n")
    assert crow_here("skills", "list", "--workspace", str(tmp_path)) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [f"review  project: {ours.resolve()}", "        Review a change.",
                                "        allowed-tools (shown, not obeyed): Read, Grep", f"        hides: {mine}",
                                f"tidy    user: {_isolated_home / '.agents/skills/tidy/SKILL.md'}", "        Tidy up."]
    assert err.splitlines() == [  # the hidden file is in the listing: said once
        f"crow: warning: skill file '{bad.resolve()}' has no description (the model reads it to choose the skill); "
        "skipped"]
    assert crow_here("skills", "list", "--workspace", str(tmp_path), "--json") == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0] == {"name": "review", "description": "Review a change.\nSecond line.", "scope": "project",
                       "path": str(ours.resolve()), "folder": str(ours.resolve().parent),
                       "allowed_tools": ["Read", "Grep"], "shadows": [str(mine)]}


def test_with_no_skills_the_list_says_where_it_looked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert crow_here("skills", "list", "--workspace", str(tmp_path)) == 0
    assert capsys.readouterr().out.startswith("no skills found (looked in .crow/skills, .agents/skills and "
                                              ".claude/skills from ")


def test_a_workspace_that_is_no_folder_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert crow_here("skills", "list", "--workspace", str(tmp_path / "nope")) == 2
    nope = str(tmp_path / "nope")
    assert capsys.readouterr().err.strip() == f"crow: error: workspace {nope!r} is not an existing folder"
