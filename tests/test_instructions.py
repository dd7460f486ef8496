"""AGENTS.md files go into the system prompt, nearest last (issue 13: "a project's AGENTS.md is ignored")."""

from __future__ import annotations

from pathlib import Path

from crow_cli.instructions import MAX_BYTES, find_instructions, system_prompt
from tests.replay_server import text_stream
from tests.support import run_crow, write_config


def _repo(tmp_path: Path) -> tuple[Path, Path, Path]:
    """outside/AGENTS.md (above the repository), repo/.git, repo/AGENTS.md, repo/pkg/AGENTS.md; config dir."""
    (tmp_path / "AGENTS.md").write_text("OUTSIDE the repository")
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "AGENTS.md").write_text("REPO root rules")
    pkg = repo / "pkg"
    pkg.mkdir()
    (pkg / "AGENTS.md").write_text("PKG rules")
    config = tmp_path / "config"
    config.mkdir()
    (config / "AGENTS.md").write_text("GLOBAL rules")
    return repo, pkg, config


def test_global_first_then_repository_root_down_to_the_workspace(tmp_path: Path) -> None:
    _, pkg, config = _repo(tmp_path)
    found = find_instructions(pkg, config)
    assert [f.text for f in found] == ["GLOBAL rules", "REPO root rules", "PKG rules"]
    assert [f.scope for f in found] == ["global", "project", "project"]
    prompt = system_prompt("be brief", found)
    assert prompt is not None and prompt.startswith("be brief")
    assert prompt.index("GLOBAL") < prompt.index("REPO") < prompt.index("PKG")  # nearest last
    assert "OUTSIDE" not in prompt and str(pkg / "AGENTS.md") in prompt


def test_outside_a_repository_only_the_workspace_file(tmp_path: Path) -> None:
    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "AGENTS.md").write_text("HERE")
    assert [f.text for f in find_instructions(folder, None)] == ["HERE"]
    assert system_prompt(None, []) is None


def test_a_big_file_is_cut_with_a_note(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("x" * (MAX_BYTES + 10))
    (item,) = find_instructions(tmp_path, None)
    assert item.text.startswith("x" * 100) and "only its first 32,768 were read" in item.text


def test_crow_run_sends_them_and_the_flag_turns_them_off(tmp_path: Path, _isolated_home: Path) -> None:
    _, pkg, _ = _repo(tmp_path)
    global_dir = _isolated_home / ".config" / "crow"
    global_dir.mkdir(parents=True)
    (global_dir / "AGENTS.md").write_text("GLOBAL from crow's config folder")
    config = write_config(tmp_path, max_retries=0)
    ran = run_crow([{"sse": text_stream("ok")}], "--system", "be brief", "hi", cwd=pkg, config=config)
    assert ran.code == 0, ran.stderr
    system = ran.requests[0]["messages"][0]
    assert system["role"] == "system" and system["content"].startswith("be brief")
    assert system["content"].index("GLOBAL from crow") < system["content"].index("REPO") < \
        system["content"].index("PKG")
    off = run_crow([{"sse": text_stream("ok")}], "--no-project-instructions", "hi", cwd=pkg, config=config)
    assert off.requests[0]["messages"] == [{"role": "user", "content": "hi"}]
