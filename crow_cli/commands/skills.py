"""`crow skills list [--workspace DIR] [--json]`: the skills a run here would offer, where each was found, and
what was skipped (one `crow: warning:` line each on stderr, as a run says them)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from ..errors import ConfigError
from .options import WorkspaceOpt, examples, fail

__all__ = ["skills_app"]

skills_app = typer.Typer(name="skills", help="Show the skills (SKILL.md folders) a run here would offer.",
                         no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                         rich_markup_mode=None)


@skills_app.command("list", epilog=examples("crow skills list", "crow skills list --json"))
def list_skills(workspace: WorkspaceOpt = None,
                as_json: Annotated[bool, typer.Option("--json", help="A JSON array: one object per skill.")] = False
                ) -> None:
    """List the skills a run in the workspace would offer (name, where found, description); a project's only
    when you trust the folder."""
    import os
    from pathlib import Path

    from ..config import default_config_path
    from ..paths import resolve_path
    from ..skills import rows, skills_here
    from ..text import strip_controls

    try:
        root = resolve_path(Path(workspace or os.getcwd()).expanduser())
    except OSError as exc:  # a symlink loop
        raise fail(ConfigError(f"workspace {workspace!r} is {exc.strerror or exc}")) from None
    if not root.is_dir():
        raise fail(ConfigError(f"workspace {workspace!r} is not an existing folder"))
    config_dir = default_config_path().parent
    skills = skills_here(root, config_dir)
    for line in (*skills.problems, *skills.notes):  # as a run says them (surfaces.common.warning_to)
        typer.echo(f"crow: warning: {strip_controls(line)}", err=True)
    if as_json:
        typer.echo(json.dumps([{"name": s.name, "description": s.description, "scope": s.scope, "path": str(s.path),
                                "folder": str(s.folder), "allowed_tools": list(s.allowed_tools),
                                "shadows": [str(p) for p in s.shadows]} for s in skills.found],
                              ensure_ascii=False, indent=2))
        return
    if not skills:
        typer.echo(f"no skills found (looked in .crow/skills, .agents/skills and .claude/skills from {root} up to "
                   f"the repository root, in {config_dir / 'skills'}, ~/.agents/skills and ~/.claude/skills)")
        return
    for line in rows(skills):
        typer.echo(line)
