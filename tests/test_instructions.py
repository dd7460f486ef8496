"""AGENTS.md files go into the system prompt, nearest last."""

from __future__ import annotations

from pathlib import Path

from crow_cli.instructions import MAX_BYTES, find_instructions, system_prompt
from tests.replay_server import text_stream
from tests.support import run_here, write_config


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


async def test_crow_run_sends_them_and_the_flag_turns_them_off(tmp_path: Path, _isolated_home: Path) -> None:
    _, pkg, _ = _repo(tmp_path)
    global_dir = _isolated_home / ".config" / "crow"
    global_dir.mkdir(parents=True)
    (global_dir / "AGENTS.md").write_text("GLOBAL from crow's config folder")
    config = write_config(tmp_path, max_retries=0)
    ran = await run_here([{"sse": text_stream("ok")}], flags={"system": "be brief"}, system="be brief",
                         cwd=pkg, config=config)
    assert ran.code == 0, ran.stderr
    system = ran.requests[0]["messages"][0]
    assert system["role"] == "system" and system["content"].startswith("be brief")
    assert system["content"].index("GLOBAL from crow") < system["content"].index("REPO") < \
        system["content"].index("PKG")
    off = await run_here([{"sse": text_stream("ok")}], project_instructions=False, cwd=pkg, config=config)
    assert off.requests[0]["messages"] == [{"role": "user", "content": "hi"}]


# an AGENTS.md that is a symlink to /proc/self/environ is skipped with one warning: the environment's keys
# never reach the system prompt
def test_a_link_to_proc_self_environ_is_skipped_with_one_warning(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / "AGENTS.md").symlink_to("/proc/self/environ")
    warnings: list[str] = []
    assert find_instructions(tmp_path, None, warn=warnings.append) == []
    assert len(warnings) == 1 and "leads to /proc/" in warnings[0] and "not read" in warnings[0]


def test_a_relative_link_out_of_the_project_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("PRIVATE KEY")
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "AGENTS.md").symlink_to("../secret")
    (repo / "pkg").mkdir()
    (repo / "pkg" / "AGENTS.md").symlink_to("../AGENTS.md")  # a link within the project is followed... to a link out
    warnings: list[str] = []
    assert find_instructions(repo / "pkg", None, warn=warnings.append) == []
    assert len(warnings) == 2 and all("outside the project" in w for w in warnings)


def test_links_within_the_project_a_loop_and_a_fifo(tmp_path: Path) -> None:
    import os

    (tmp_path / ".git").mkdir()
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "rules.md").write_text("RULES")
    (tmp_path / "AGENTS.md").symlink_to("docs/rules.md")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "AGENTS.md").symlink_to("AGENTS.md")  # points at itself
    (tmp_path / "fifo").mkdir()
    os.mkfifo(tmp_path / "fifo" / "AGENTS.md")
    warnings: list[str] = []
    assert [f.text for f in find_instructions(tmp_path / "pkg", None, warn=warnings.append)] == ["RULES"]
    assert warnings == [f"{tmp_path / 'pkg' / 'AGENTS.md'} is a symlink loop; not read"]
    warnings.clear()
    assert find_instructions(tmp_path / "fifo", None, warn=warnings.append)[0].text == "RULES"  # never blocks
    assert warnings == [f"{tmp_path / 'fifo' / 'AGENTS.md'} is not a regular file; not read"]


def test_secrets_are_masked_as_in_tool_output(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("use key sk-live-123456 for tests")
    (item,) = find_instructions(tmp_path, None, secrets=["sk-live-123456", None])
    assert item.text == "use key [REDACTED] for tests"


# many nested AGENTS.md files stay within a total budget (40 of them gave a 1.3 MB system prompt)
def test_a_total_budget_keeps_the_nearest_files_and_says_what_was_left_out(tmp_path: Path) -> None:
    from crow_cli.instructions import MAX_TOTAL_BYTES

    folder = tmp_path
    (folder / ".git").mkdir()
    for depth in range(40):
        (folder / "AGENTS.md").write_text(f"LEVEL{depth} " + "x" * (MAX_BYTES - 20))
        folder = folder / "d"
        folder.mkdir()
    workspace = folder.parent
    warnings: list[str] = []
    found = find_instructions(workspace, None, warn=warnings.append)
    prompt = system_prompt(None, found) or ""
    assert len(prompt.encode()) < MAX_TOTAL_BYTES + 8192
    assert "LEVEL39 " in prompt and "LEVEL38 " in prompt and "LEVEL0 " not in prompt  # nearest first
    assert "left out: " in found[-1].text and str(tmp_path / "AGENTS.md") in found[-1].text
    assert len(warnings) == 38


# an AGENTS.md saved as UTF-16 with a byte order mark (Windows editors) is decoded, not read as UTF-8
def test_utf16_with_a_byte_order_mark_is_decoded(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_bytes("Règles: tabs".encode("utf-16"))
    (item,) = find_instructions(tmp_path, None)
    assert item.text == "Règles: tabs"


async def test_crow_run_skips_a_link_out_with_a_warning_and_sends_no_secret(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("CROW_API_KEY=sk-test")
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "AGENTS.md").symlink_to("/proc/self/environ")
    ran = await run_here([{"sse": text_stream("ok")}], cwd=repo, config=write_config(tmp_path, max_retries=0))
    assert ran.code == 0, ran.stderr
    assert ran.requests[0]["messages"] == [{"role": "user", "content": "hi"}]
    assert ran.stderr.count("AGENTS.md leads to /proc/") == 1


# a repository set up for Claude Code has CLAUDE.md and no AGENTS.md
def test_claude_md_is_read_where_there_is_no_agents_md_with_one_line_saying_so(tmp_path: Path) -> None:
    repo, pkg, _ = _repo(tmp_path)
    (repo / "AGENTS.md").unlink()
    (repo / "CLAUDE.md").write_text("CLAUDE rules")
    (pkg / "CLAUDE.md").write_text("never read: pkg has an AGENTS.md")
    lines: list[str] = []
    found = find_instructions(pkg, None, warn=lines.append)
    assert [f.text for f in found] == ["CLAUDE rules", "PKG rules"]
    assert lines == [f"no AGENTS.md in {repo}: reading its CLAUDE.md instead (an AGENTS.md is read first)"]
    prompt = system_prompt(None, found) or ""
    assert f"# CLAUDE.md (project instructions: {repo / 'CLAUDE.md'})" in prompt


async def test_crow_run_sends_claude_md_and_says_so_once(tmp_path: Path) -> None:
    (tmp_path / "CLAUDE.md").write_text("Use tabs.")
    ran = await run_here([{"sse": text_stream("ok")}], cwd=tmp_path, config=write_config(tmp_path, max_retries=0))
    assert ran.code == 0, ran.stderr
    assert "Use tabs." in ran.requests[0]["messages"][0]["content"]
    assert ran.stderr.count("reading its CLAUDE.md instead") == 1
