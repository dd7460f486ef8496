"""`crow agents list [--workspace DIR] [--json]`: the subagents the `task` tool would offer in a run here, where
each was found, and what was skipped (one `crow: warning:` line each on stderr, as a run says them)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from ..errors import ConfigError
from .options import WorkspaceOpt, examples, fail

__all__ = ["agents_app"]

agents_app = typer.Typer(name="agents", help="Show the subagents (agent files) a run here would offer.",
                         no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                         rich_markup_mode=None)


@agents_app.command("list", epilog=examples("crow agents list", "crow agents list --json"))
def list_agents(workspace: WorkspaceOpt = None,
                as_json: Annotated[bool, typer.Option("--json", help="A JSON array: one object per agent.")] = False
                ) -> None:
    """List the agents the task tool would offer in the workspace (name, where found, model or profile, tools,
    description); a project's only when you trust the folder."""
    import os
    from pathlib import Path

    from ..agents import find_agents
    from ..config import default_config_path
    from ..paths import resolve_path
    from ..text import strip_controls
    from ..trust import is_trusted

    try:
        root = resolve_path(Path(workspace or os.getcwd()).expanduser())
    except OSError as exc:  # a symlink loop
        raise fail(ConfigError(f"workspace {workspace!r} is {exc.strerror or exc}")) from None
    if not root.is_dir():
        raise fail(ConfigError(f"workspace {workspace!r} is not an existing folder"))
    config_dir = default_config_path().parent
    problems: list[str] = []
    found = find_agents(root, config_dir, trusted=is_trusted(root), warn=problems.append)
    for line in problems:  # as a run says them (surfaces.common.warning_to)
        typer.echo(f"crow: warning: {strip_controls(line)}", err=True)
    if as_json:
        typer.echo(json.dumps([{"name": a.name, "description": a.description, "scope": a.scope, "path": str(a.path),
                                "model": a.model, "profile": a.profile,
                                "tools": None if a.tools is None else list(a.tools)} for a in found.values()],
                              ensure_ascii=False, indent=2))
        return
    if not found:
        typer.echo(f"no agents found (looked in .crow/agents and .claude/agents at the project root above {root}, "
                   f"in {config_dir / 'agents'} and ~/.claude/agents); the task tool offers its general agent")
        return
    for agent in found.values():
        runs = ", ".join(p for p in (f"model {agent.model}" if agent.model else "",
                                     f"profile {agent.profile}" if agent.profile else "") if p) or "the run's model"
        tools = ", ".join(agent.tools) if agent.tools is not None else "every tool but task"
        typer.echo(strip_controls(f"{agent.name}  ({agent.scope}: {agent.path})\n    {runs}; tools: {tools}\n"
                                  f"    {agent.description}"))
