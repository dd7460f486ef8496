"""Skills (`SKILL.md` folders): where they are found, which one of a name wins, what is skipped, what a load returns."""

from __future__ import annotations

import os
from pathlib import Path

from crow_cli.skills import MAX_BYTES, MAX_DESCRIPTION_CHARS, MAX_LISTED, find_skills, load_skill, rows, skills_here
from crow_cli.trust import TrustStore


def skill(folder: Path, text: str | bytes, **files: str) -> Path:
    """A skill folder `folder` with `text` as its SKILL.md and `files` (relative path: text) beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "SKILL.md"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    for name, body in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(body)
    return path


def md(name: str, description: str = "Does a thing.", body: str = "Do it well.") -> str:
    return f"---\nname: {name}\ndescription: {description}\n---\n{body}\n"


def test_skills_are_found_in_every_folder_and_the_first_of_a_name_wins(tmp_path: Path) -> None:
    work, config, home = tmp_path / "work", tmp_path / "config", tmp_path / "home"
    (work / ".git").mkdir(parents=True)
    crow = skill(work / ".crow/skills/alpha", md("alpha", "From crow."))
    claude = skill(work / ".claude/skills/alpha", md("alpha", "From Claude."))
    skill(work / ".agents/skills/beta", md("beta"))
    mine = skill(config / "skills/alpha", md("alpha", "Mine."))
    skill(home / ".claude/skills/gamma", "---\ndescription: 'No name: the folder names it.'\n---\nBody.")
    skill(home / ".agents/skills/delta", md("delta"))
    found = find_skills(work.resolve(), config, home, trusted=True)
    assert [(s.name, s.scope) for s in found.found] == [("alpha", "project"), ("beta", "project"),
                                                        ("delta", "user"), ("gamma", "user")]
    alpha = found.get("alpha")
    assert alpha is not None and alpha.path == work.resolve() / ".crow/skills/alpha/SKILL.md" and crow.exists()
    assert alpha.shadows == (claude.resolve(), mine)
    assert found.shadowing == (f"skill 'alpha': the project's {alpha.path} is used, not {claude.resolve()}, your "
                               f"{mine}",)
    assert found.notes == ()
    assert found.problems == ()
    assert found.get("gamma") is not None and found.get("gamma").description == "No name: the folder names it."


def test_an_untrusted_projects_skills_are_skipped_with_one_note(tmp_path: Path) -> None:
    work, config = tmp_path / "work", tmp_path / "config"
    skill(work / ".crow/skills/alpha", md("alpha"))
    skill(work / ".claude/skills/beta", md("beta"))
    skill(config / "skills/mine", md("mine"))
    found = find_skills(work.resolve(), config, trusted=False)
    assert [s.name for s in found.found] == ["mine"]
    assert found.notes == (f"the project's skills in {work.resolve()}/.crow/skills, {work.resolve()}/.claude/skills "
                           f"are not used: {work.resolve()} is not a folder you trust",)


def test_skills_here_reads_the_trust_record(tmp_path: Path) -> None:
    work = tmp_path / "work"
    skill(work / ".crow/skills/alpha", md("alpha"))
    assert not skills_here(work.resolve(), tmp_path / "config")
    TrustStore().set(work, True)
    assert [s.name for s in skills_here(work.resolve(), tmp_path / "config").found] == ["alpha"]


def test_a_skill_that_cannot_be_read_is_one_line_and_skipped(tmp_path: Path) -> None:
    work, outside = tmp_path / "work", tmp_path / "outside"
    base = work / ".crow/skills"
    skill(base / "good", md("good"))
    skill(base / "yaml", "---\nname: [oops\ndescription: x\n---\nBody.")
    skill(base / "open", "---\nname: open\ndescription: never closed\n")
    skill(base / "bare", "No front matter at all.")
    skill(base / "nodesc", "---\nname: nodesc\n---\nBody.")
    skill(base / "badname", md("has space"))
    skill(base / "list", "---\n- a\n- b\n---\nBody.")
    skill(base / "big", md("big", body="x" * MAX_BYTES))
    skill(base / "latin", md("latin", "caf\xe9").encode("latin-1"))
    skill(outside / "secret", md("secret"))
    (base / "leak").symlink_to(outside / "secret")
    (base / "link").mkdir()
    (base / "link" / "SKILL.md").symlink_to(outside / "secret" / "SKILL.md")
    (base / "fifo").mkdir()
    os.mkfifo(base / "fifo" / "SKILL.md")
    found = find_skills(work.resolve(), None, trusted=True)
    assert [s.name for s in found.found] == ["good"]
    root = work.resolve() / ".crow/skills"
    assert sorted(found.problems) == sorted([
        f"skill file '{root}/badname/SKILL.md': its name 'has space' is no skill name (letters, digits, - and _; "
        "at most 64); skipped",
        f"skill file '{root}/bare/SKILL.md' has no front matter (a '---' block with name and description); skipped",
        f"skill file '{root}/big/SKILL.md' is {len(md('big', body='x' * MAX_BYTES).encode()):,} bytes; "
        f"at most {MAX_BYTES:,}; skipped",
        f"skill file '{root}/fifo/SKILL.md' is not a regular file; skipped",
        f"skill file '{root}/latin/SKILL.md' cannot be read: it is not UTF-8 text; skipped",
        f"skill folder '{root}/leak' leads to {outside.resolve() / 'secret'}, outside the project; skipped",
        f"skill file '{root}/link/SKILL.md' leads to {outside.resolve() / 'secret/SKILL.md'}, outside the project; "
        "skipped",
        f"skill file '{root}/list/SKILL.md': its front matter is not a map of 'key: value' lines; skipped",
        f"skill file '{root}/nodesc/SKILL.md' has no description (the model reads it to choose the skill); skipped",
        f"skill file '{root}/open/SKILL.md': its front matter has no closing '---' line; skipped",
        f"skill file '{root}/yaml/SKILL.md': its front matter is not valid YAML (line 3): expected ',' or ']', but "
        "got ':'; skipped",
    ])


def test_a_users_skill_may_be_a_link_anywhere(tmp_path: Path) -> None:
    config, elsewhere = tmp_path / "config", tmp_path / "elsewhere"
    skill(elsewhere / "mine", md("mine"), **{"notes.md": "n"})
    (config / "skills").mkdir(parents=True)
    (config / "skills" / "mine").symlink_to(elsewhere / "mine")
    (tmp_path / "work").mkdir()
    found = find_skills((tmp_path / "work").resolve(), config, trusted=True)
    (mine,) = found.found
    assert mine.folder == (elsewhere / "mine").resolve() and found.folders == (mine.folder,)


def test_the_listing_is_bounded_in_count_and_length(tmp_path: Path) -> None:
    config = tmp_path / "config"
    for n in range(MAX_LISTED + 3):
        skill(config / f"skills/s{n:02}", md(f"s{n:02}", "word " * 100))
    (tmp_path / "work").mkdir()
    listing = find_skills((tmp_path / "work").resolve(), config, trusted=True).listing()
    assert len(listing) == MAX_LISTED + 1 and listing[-1] == "- (3 more skills are not listed here)"
    assert all(len(line) <= len("- s00: ") + MAX_DESCRIPTION_CHARS for line in listing)
    assert listing[0].endswith("word…") and "\n" not in "".join(listing)


def test_a_load_is_the_body_and_the_folders_files_as_read_file_takes_them(tmp_path: Path) -> None:
    work, config = tmp_path / "work", tmp_path / "config"
    (work / ".git").mkdir(parents=True)
    skill(work / ".crow/skills/forms", md("forms", body="# Forms\nRun scripts/fill.py."),
          **{"scripts/fill.py": "print(1)", "reference.md": "ref", ".hidden": "no"})
    (work / "outside.txt").write_text("x")
    (work / ".crow/skills/forms/link.md").symlink_to(tmp_path / "nowhere.md")
    skill(config / "skills/mine", md("mine", body=""), **{"notes.md": "n"})
    found = find_skills(work.resolve(), config, trusted=True)
    forms, mine = found.get("forms"), found.get("mine")
    assert forms is not None and mine is not None
    root = work.resolve()
    assert load_skill(forms, root) == ("Base directory for this skill: .crow/skills/forms\n\n# Forms\nRun "
                                       "scripts/fill.py.\n\nFiles of this skill (read them with read_file at these "
                                       "paths):\n.crow/skills/forms/reference.md\n.crow/skills/forms/scripts/fill.py")
    assert load_skill(mine, root) == (f"Base directory for this skill: {config.resolve()}/skills/mine\n\n(the skill "
                                      "has no instructions besides its files)\n\nFiles of this skill (read them with "
                                      f"read_file at these paths):\n{config.resolve()}/skills/mine/notes.md")


def test_a_skill_is_read_again_when_loaded_with_the_runs_secrets_masked(tmp_path: Path) -> None:
    config = tmp_path / "config"
    path = skill(config / "skills/mine", md("mine", body="old"))
    (tmp_path / "work").mkdir()
    (mine,) = find_skills((tmp_path / "work").resolve(), config, trusted=True).found
    path.write_text(md("mine", body="new, with sk-live-123456789012"))
    assert load_skill(mine, tmp_path, ["sk-live-123456789012"]).endswith("\n\nnew, with [REDACTED]")


def test_rows_name_the_scope_and_file_without_control_characters(tmp_path: Path) -> None:
    config = tmp_path / "config"
    path = skill(config / "skills/mine", "---\nname: mine\ndescription: \"Red \\e[31mtext\"\nallowed-tools: "
                 "Bash(git add:*) Read\n---\n")
    (tmp_path / "work").mkdir()
    found = find_skills((tmp_path / "work").resolve(), config, trusted=True)
    assert rows(found) == [f"mine  user: {path}", "      Red [31mtext",
                           "      allowed-tools (shown, not obeyed): Bash(git add:*), Read"]


def test_a_folder_linked_under_two_names_is_one_skill_and_no_shadow(tmp_path: Path) -> None:
    work, home = tmp_path / "work", tmp_path / "home"
    skill(work / ".claude/skills/alpha", md("alpha"))
    skill(work / ".claude/skills/beta", md("beta"))
    (work / ".agents").mkdir()
    (work / ".agents/skills").symlink_to(work / ".claude/skills")  # one folder, two names
    (work / ".crow/skills").mkdir(parents=True)
    (work / ".crow/skills/beta").symlink_to(work / ".claude/skills/beta")
    skill(home / ".claude/skills/mine", md("mine"))
    (work / ".claude/skills/mine").symlink_to(home / ".claude/skills/mine")  # out of the project: skipped
    found = find_skills(work.resolve(), None, home, trusted=True)
    assert [(s.name, s.scope) for s in found.found] == [("alpha", "project"), ("beta", "project"), ("mine", "user")]
    assert found.shadowing == () and len(found.problems) == 1 and "outside the project" in found.problems[0]
