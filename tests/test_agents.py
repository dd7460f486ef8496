"""Agent definitions (`crow_cli.agents`): Claude Code's files read as they are, project agents only when trusted,
a file that cannot be read skipped with one line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from crow_cli.agents import AgentDefinition, find_agents, parse_agent, resolve_tools
from crow_cli.errors import ConfigError

CLAUDE_FILE = """---
name: code-reviewer
description: Expert code review specialist. Use after writing code.
tools: Read, Grep, Glob, Bash, WebFetch, NotebookEdit
model: sonnet
---
You are a senior code reviewer.
"""


def _agent(folder: Path, name: str, body: str = "You help.", **meta: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    lines = "".join(f"{k}: {v}\n" for k, v in {"description": f"the {name} agent", **meta}.items())
    path = folder / f"{name}.md"
    path.write_text(f"---\n{lines}---\n{body}\n")
    return path


def test_a_claude_code_agent_file_is_read_as_it_is() -> None:
    warned: list[str] = []
    agent = parse_agent(CLAUDE_FILE, Path("code-reviewer.md"), "project", warned.append)
    assert (agent.name, agent.instructions) == ("code-reviewer", "You are a senior code reviewer.")
    assert agent.description == "Expert code review specialist. Use after writing code."
    assert agent.tools == ("Read", "Grep", "Glob", "Bash", "WebFetch", "NotebookEdit")
    assert agent.model is None and "sonnet" in warned[0]  # a Claude alias names no model a server here knows


def test_claude_tool_names_map_to_crows_and_unknown_ones_are_warned_about() -> None:
    agent = parse_agent(CLAUDE_FILE, Path("r.md"), "user")
    offered = ["read_file", "search_files", "list_directory", "run_shell", "web_fetch", "task"]
    chosen, problems = resolve_tools(agent, offered)
    assert chosen == ["read_file", "search_files", "list_directory", "run_shell", "web_fetch"]
    assert len(problems) == 1 and "NotebookEdit" in problems[0]


def test_a_child_is_never_given_the_task_tool() -> None:
    agent = AgentDefinition("a", "d", "i", Path("a.md"), "user", tools=("Task", "task", "read_file"))
    chosen, problems = resolve_tools(agent, ["read_file", "task"])
    assert chosen == ["read_file"] and len(problems) == 2
    everything = AgentDefinition("b", "d", "i", Path("b.md"), "user")
    assert resolve_tools(everything, ["read_file", "task", "run_shell"]) == (["read_file", "run_shell"], [])


@pytest.mark.parametrize(("text", "why"), [
    ("no front matter\n", "no front matter"),
    ("---\nname: [unclosed\n---\nbody\n", "not valid YAML"),
    ("---\nname: x\n---\nbody\n", "no description"),
    ("---\nname: ../evil\ndescription: d\n---\nbody\n", "is not letters"),
    ("---\ndescription: d\n---\n\n", "no instructions"),
    ("---\ndescription: d\ntools: 3\n---\nbody\n", "list of tool names"),
])
def test_a_bad_file_is_a_one_line_error(text: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        parse_agent(text, Path("x.md"), "user")


def test_project_agents_are_used_only_in_a_trusted_folder(tmp_path: Path) -> None:
    project = tmp_path / "repo"
    (project / ".git").mkdir(parents=True)
    _agent(project / ".crow" / "agents", "explorer")
    warned: list[str] = []
    assert find_agents(project, None, trusted=False, warn=warned.append, home=tmp_path / "home") == {}
    assert len(warned) == 1 and "not trusted" in warned[0]
    found = find_agents(project, None, trusted=True, warn=warned.append, home=tmp_path / "home")
    assert list(found) == ["explorer"] and found["explorer"].scope == "project"


def test_later_folders_override_earlier_ones_by_name(tmp_path: Path) -> None:
    home, config, project = tmp_path / "home", tmp_path / "config", tmp_path / "repo"
    project.mkdir()
    _agent(home / ".claude" / "agents", "a", "from claude home")
    _agent(config / "agents", "a", "from crow config")
    _agent(config / "agents", "b", "user b")
    _agent(project / ".claude" / "agents", "b", "project claude b")
    _agent(project / ".crow" / "agents", "b", "project crow b")
    found = find_agents(project, config, trusted=True, warn=print, home=home)
    assert found["a"].instructions == "from crow config"
    assert found["b"].instructions == "project crow b"


def test_a_project_file_leading_outside_the_project_is_skipped(tmp_path: Path) -> None:
    project = tmp_path / "repo"
    outside = _agent(tmp_path / "elsewhere", "spy")
    (project / ".crow" / "agents").mkdir(parents=True)
    os.symlink(outside, project / ".crow" / "agents" / "spy.md")
    _agent(project / ".crow" / "agents", "fine")
    warned: list[str] = []
    found = find_agents(project, None, trusted=True, warn=warned.append, home=tmp_path / "home")
    assert list(found) == ["fine"]
    assert len(warned) == 1 and "outside the project" in warned[0]


def test_the_runs_secrets_are_masked_in_what_is_read(tmp_path: Path) -> None:
    _agent(tmp_path / "config" / "agents", "k", "use sk-SECRET-1 for it")
    found = find_agents(tmp_path, tmp_path / "config", trusted=False, warn=print, secrets=["sk-SECRET-1"],
                        home=tmp_path / "home")
    assert "sk-SECRET-1" not in found["k"].instructions
