"""Agent definitions: the subagents the built-in `task` tool can start, as Markdown files with front matter.

An agent is a file `NAME.md` (Claude Code's `.claude/agents/` files are read as they are) whose front matter says
what it is (`name`, `description`, `tools`, `model`, `profile`) and whose body is its instructions (`parse_agent`).
A project's agents come from someone else's repository: they are read only in a folder the person trusts
(`trust.is_trusted`), and get the care prompt files get (`prompt_files`); a file that cannot be read is one warning
and is skipped, never the end of a run. Where they are found and the format: docs/subagents.md.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .errors import ConfigError
from .front_matter import split_front_matter
from .instructions import project_folders
from .prompt_files import read_text_file, resolve_inside
from .text import mask_secrets, strip_controls

__all__ = ["CLAUDE_TOOL_NAMES", "MAX_AGENTS", "MAX_BYTES", "AgentDefinition", "find_agents", "parse_agent",
           "resolve_tools"]

MAX_BYTES = 64 * 1024
"""Bytes of one agent file at most."""
MAX_AGENTS = 50
"""Agents offered at most (the `task` tool's description names each)."""
NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""What an agent's name is made of."""
PROJECT_FOLDERS = (Path(".claude") / "agents", Path(".crow") / "agents")
"""Where a project keeps its agents, from its root (later ones win)."""
USER_FOLDER = "agents"
"""Where the user keeps theirs, in crow's config folder."""
CLAUDE_TOOL_NAMES: dict[str, str | None] = {
    "Read": "read_file", "Write": "write_file", "Edit": "edit_file", "MultiEdit": "edit_file",
    "Bash": "run_shell", "Grep": "search_files", "Glob": "list_directory", "LS": "list_directory",
    "WebFetch": "web_fetch", "WebSearch": "web_search", "TodoWrite": "todo_write", "Task": None, "Agent": None,
}
"""Claude Code's tool names as crow's; None: not given to a subagent (a child starts no children)."""
CLAUDE_MODEL_ALIASES = ("sonnet", "opus", "haiku")
"""Claude Code's model aliases: they name no model an OpenAI-compatible server knows; the parent's is used."""
Scope = Literal["user", "project"]


@dataclass(frozen=True, slots=True)
class AgentDefinition:
    """One agent, as its file defines it."""

    name: str
    description: str
    instructions: str
    """The file's body: what the child is told after crow's system prompt."""
    path: Path
    scope: Scope
    tools: tuple[str, ...] | None = None
    """The tool names it may use (Claude Code's mapped to crow's); None: every tool of the parent but `task`."""
    model: str | None = None
    """The child's model; None: the parent's (or the profile's)."""
    profile: str | None = None
    """A `[profiles.NAME]` of crow's config whose server, key and model the child uses; None: the parent's."""


def parse_agent(text: str, path: Path, scope: Scope, warn: Callable[[str], None] | None = None) -> AgentDefinition:
    """The agent that `text` (the file at `path`) defines.

    Raises:
        ConfigError: no front matter, front matter that is not a YAML map (`front_matter.split_front_matter`), no
            description, a bad name, a field of the wrong type, or an empty body.
    """
    meta, body = split_front_matter(text, f"agent file {str(path)!r}")
    if meta is None:
        raise ConfigError(f"agent file {str(path)!r} has no front matter (a first line ---, then name and "
                          "description, then ---)")
    name = _text(meta, "name", path) or path.stem
    if not NAME.fullmatch(name):
        raise ConfigError(f"agent file {str(path)!r}: name {strip_controls(name)[:64]!r} is not letters, digits, "
                          "_ and - (at most 64)")
    description = " ".join((_text(meta, "description", path) or "").split())
    if not description:
        raise ConfigError(f"agent file {str(path)!r} has no description (the model reads it to choose the agent)")
    if not body:
        raise ConfigError(f"agent file {str(path)!r} has no instructions (its body is empty)")
    model = _text(meta, "model", path)
    if model == "inherit":
        model = None
    elif model in CLAUDE_MODEL_ALIASES:
        if warn is not None:
            warn(f"agent {name!r} ({path}): model {model!r} is a Claude Code alias; the parent's model is used")
        model = None
    return AgentDefinition(name, description, body, path, scope, _tools(meta.get("tools"), path),
                           model or None, _text(meta, "profile", path) or None)


def _text(meta: dict[str, Any], key: str, path: Path) -> str | None:
    value = meta.get(key)
    if value is None:
        return None
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        raise ConfigError(f"agent file {str(path)!r}: {key} must be text")
    return str(value).strip()


def _tools(value: Any, path: Path) -> tuple[str, ...] | None:
    """The `tools` key as a tuple of names (Claude Code writes one line, `Read, Grep, Glob`); None: absent."""
    if value is None:
        return None
    if isinstance(value, str):
        names = [n.strip() for n in value.split(",")]
    elif isinstance(value, list) and all(isinstance(n, str) for n in value):
        names = [n.strip() for n in value]
    else:
        raise ConfigError(f"agent file {str(path)!r}: tools must be a list of tool names")
    return tuple(dict.fromkeys(n for n in names if n))


def resolve_tools(agent: AgentDefinition, available: Iterable[str]) -> tuple[list[str], list[str]]:
    """The names of `available` tools the agent may use, and a warning line for each name it gives that is
    none of them (Claude Code's names mapped to crow's first; `Task` is never given: one level of subagents)."""
    offered = [n for n in available if n != "task"]
    if agent.tools is None:
        return offered, []
    chosen: list[str] = []
    problems: list[str] = []
    for name in agent.tools:
        own = CLAUDE_TOOL_NAMES.get(name, name) if name not in offered else name
        if own is None or own == "task":
            problems.append(f"agent {agent.name!r}: {name} is not given to a subagent (subagents start no "
                            "subagents)")
        elif own not in offered:
            problems.append(f"agent {agent.name!r}: no tool {strip_controls(name)!r} here; ignored")
        elif own not in chosen:
            chosen.append(own)
    return chosen, problems


def find_agents(workspace: Path, config_dir: Path | None, *, trusted: bool,
                warn: Callable[[str], None], secrets: Iterable[str | None] = (),
                home: Path | None = None) -> dict[str, AgentDefinition]:
    """Every agent definition that applies in `workspace`, by name; later folders override earlier ones by name:
    the user's `~/.claude/agents/`, crow's config folder `agents/`, then the project's `.claude/agents/` and
    `.crow/agents/` at its root (the repository root above the workspace; only when `trusted`, else one warning
    line per folder).

    Args:
        workspace: the run's folder; the project's folders are at its root.
        config_dir: crow's config folder (its `agents/`), None: not looked in.
        trusted: whether the person trusts the project (`trust.is_trusted`); False skips its agents.
        warn: told each file skipped and why, and each untrusted project folder holding agents, one line each.
        secrets: the run's API keys, masked in what is read.
        home: the home folder (its `.claude/agents/`); default the user's (none when it is not known).
    """
    if home is None:
        known = os.path.expanduser("~")
        home = Path(known) if known != "~" else None  # no home folder known: no ~/.claude/agents
    root = project_folders(workspace)[0]
    folders: list[tuple[Path, Scope]] = [] if home is None else [(home / ".claude" / "agents", "user")]
    if config_dir is not None:
        folders.append((config_dir / USER_FOLDER, "user"))
    # a project at the home folder: its .claude/agents are the user's, read above
    project: list[tuple[Path, Scope]] = [(root / sub, "project") for sub in PROJECT_FOLDERS
                                         if root / sub not in [f for f, _ in folders]]
    found: dict[str, AgentDefinition] = {}
    for folder, scope in (*folders, *project):
        files = _files(folder)
        if not files:
            continue
        if scope == "project" and not trusted:
            warn(f"the agents in {folder} are not used: this folder is not trusted")
            continue
        for file in files:
            agent = _read(file, scope, root if scope == "project" else None, warn, secrets)
            if agent is not None:
                found.pop(agent.name, None)
                found[agent.name] = agent
    if len(found) > MAX_AGENTS:
        warn(f"{len(found)} agents found; only the first {MAX_AGENTS} by name are offered")
        found = {n: found[n] for n in sorted(found)[:MAX_AGENTS]}
    return found


def _files(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if p.suffix == ".md" and not p.is_dir())
    except OSError:  # missing, or no folder
        return []


def _read(path: Path, scope: Scope, root: Path | None, warn: Callable[[str], None],
          secrets: Iterable[str | None]) -> AgentDefinition | None:
    """The agent at `path`, or None (`warn` told why) when it cannot be read or leads outside `root`."""
    what = f"agent file {str(path)!r}"
    try:
        real = path if root is None else resolve_inside(path, root, what)
        text = mask_secrets(read_text_file(real, what, MAX_BYTES), secrets)
        return parse_agent(text, path, scope, warn)
    except ConfigError as exc:
        warn(f"{exc}; skipped")
        return None
