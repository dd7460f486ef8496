"""The `skill` tool, black-box through `crow run` against the replay server: a skill's name and description are in
the first request, its body only in the `skill` call's result (under the call's own id), and `read_file` reads the
files it lists; an untrusted project's skills are not offered; a bad skill is a warning, a shadowed one is said.
In process: what `read_file` may read of a skill's folder, and what not."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from crow_cli.errors import OutsideWorkspace
from crow_cli.skills import find_skills
from crow_cli.tools.builtin.files import list_directory, read_file
from crow_cli.tools.builtin.skill import skill
from crow_cli.tools.context import ToolContext, using_context
from crow_cli.trust import TrustStore
from tests.support import run_crow, script, tool_messages

BODY = "BODY-MARKER-77: fill the form with scripts/fill.py."


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def md(name: str, description: str, body: str) -> str:
    return f"---\nname: {name}\ndescription: {description}\n---\n{body}\n"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository with the skill `forms` in `.crow/skills`, crow's built-in prompt on (it lists skills)."""
    monkeypatch.setenv("CROW_DEFAULT_PROMPT", "1")
    work = tmp_path / "work"
    (work / ".git").mkdir(parents=True)
    write(work / ".crow/skills/forms/SKILL.md", md("forms", "Fill in PDF forms.", BODY))
    write(work / ".crow/skills/forms/scripts/fill.py", "print('filled')\n")
    return work


def system(request: dict[str, Any]) -> str:
    first = request["messages"][0]
    assert first["role"] == "system"
    return str(first["content"])


def offered(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools") or []]


def test_a_skills_description_is_offered_first_and_its_body_comes_with_the_skill_calls_result(
        project: Path, _isolated_home: Path) -> None:
    TrustStore().set(project, True)
    notes = write(_isolated_home / ".config/crow/skills/notes/notes.md", "USER-SKILL-FILE-31\n")
    write(notes.parent / "SKILL.md", md("notes", "Keep notes the user's way.", "Read notes.md."))
    steps = script([("call_sk_1", "skill", {"name": "forms"})], [("call_rf_2", "read_file", {"path": str(notes)})],
                   final="Filled.")
    ran = run_crow(steps, "fill the form", cwd=project)
    assert ran.code == 0, ran.stderr
    assert ran.stderr.count("crow: warning:") == 0
    first = ran.requests[0]
    assert "skill" in offered(first)
    assert "- forms: Fill in PDF forms.\n- notes: Keep notes the user's way." in system(first)
    assert "BODY-MARKER-77" not in json.dumps(first)
    (loaded,) = tool_messages(ran.requests[1])
    assert loaded["tool_call_id"] == "call_sk_1"
    assert loaded["content"] == ("Base directory for this skill: .crow/skills/forms\n\n" + BODY + "\n\nFiles of this "
                                 "skill (read them with read_file at these paths):\n.crow/skills/forms/scripts/fill.py")
    read = tool_messages(ran.requests[2])[-1]
    assert read["tool_call_id"] == "call_rf_2" and read["content"] == "USER-SKILL-FILE-31\n"


def test_an_untrusted_projects_skills_are_not_offered(project: Path) -> None:
    ran = run_crow(script(final="Done."), "fill the form", cwd=project)
    assert ran.code == 0, ran.stderr
    assert "forms" not in system(ran.requests[0]) and "skill" not in offered(ran.requests[0])
    assert ran.stderr.count(f"crow: warning: the project's skills in {project.resolve()}/.crow/skills are not used: "
                            f"{project.resolve()} is not a folder you trust") == 1


def test_a_bad_skill_is_a_warning_and_a_shadowed_one_is_said(project: Path, _isolated_home: Path) -> None:
    TrustStore().set(project, True)
    bad = write(project / ".claude/skills/broken/SKILL.md", "---\nname: broken\ndescription: [unclosed\n---\nx\n")
    mine = write(_isolated_home / ".config/crow/skills/forms/SKILL.md", md("forms", "My own forms.", "MINE"))
    ran = run_crow(script(final="Done."), "hi", cwd=project)
    assert ran.code == 0, ran.stderr
    assert ran.stderr.count(f"crow: warning: skill file '{bad.resolve()}': its front matter is not valid YAML") == 1
    used = project.resolve() / ".crow/skills/forms/SKILL.md"
    assert ran.stderr.count(f"crow: warning: skill 'forms': the project's {used} is used, not your {mine}") == 1
    assert "- forms: Fill in PDF forms." in system(ran.requests[0]) and "My own forms" not in system(ran.requests[0])


def test_read_file_reads_a_skills_folder_and_nothing_else_outside_the_workspace(tmp_path: Path) -> None:
    work, config = tmp_path / "work", tmp_path / "config"
    work.mkdir()
    folder = write(config / "skills/mine/SKILL.md", md("mine", "Mine.", "Body.")).parent
    write(folder / "ref.md", "REF")
    write(config / "config.toml", "api_key = 'secret'\n")
    (folder / "leak.md").symlink_to(config / "config.toml")
    skills = find_skills(work.resolve(), config, trusted=True)
    context = ToolContext.for_workspace(work)
    with using_context(ToolContext(context.workspace, skills=skills)):
        assert read_file(str(folder / "ref.md")) == "REF"
        assert list_directory(str(folder)).startswith(f"{folder.resolve()}/ (3 entries)")
        for path in (config / "config.toml", folder / "leak.md", folder.parent):
            with pytest.raises(OutsideWorkspace):
                read_file(str(path))
    with using_context(context), pytest.raises(OutsideWorkspace):  # a run without skills reads no skill folder
        read_file(str(folder / "ref.md"))


async def test_the_skill_tool_names_the_skills_when_the_name_is_unknown(tmp_path: Path) -> None:
    write(tmp_path / "config/skills/mine/SKILL.md", md("mine", "Mine.", "Body."))
    (tmp_path / "work").mkdir()
    skills = find_skills((tmp_path / "work").resolve(), tmp_path / "config", trusted=True)
    context = ToolContext((tmp_path / "work").resolve(), skills=skills)
    from crow_cli.errors import ToolError

    with pytest.raises(ToolError, match="no skill is named 'theirs'; the skills are: mine"):
        await asyncio.wait_for(skill.run({"name": "theirs"}, context), 30)
    assert (await skill.run({"name": "mine"}, context)).text.endswith("\n\nBody.")
