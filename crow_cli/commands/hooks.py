"""`crow hooks list [--json]`: the lifecycle hooks that would run here, and from which file.

The config file's hooks always; a project's `.crow/settings.toml` ones only in a trusted folder (those of an
untrusted one are listed as not running). Nothing is asked and nothing is run.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from ..errors import CrowError
from ..text import strip_controls, visible
from .options import ConfigOpt, ProfileOpt, WorkspaceOpt, examples, fail

__all__ = ["hooks_app"]

hooks_app = typer.Typer(name="hooks", help="Show the lifecycle hooks that would run here (docs/hooks.md).",
                        no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                        rich_markup_mode=None)


@hooks_app.command("list", epilog=examples("crow hooks list", "crow hooks list --json"))
def list_hooks(workspace: WorkspaceOpt = None, profile: ProfileOpt = None, config: ConfigOpt = None,
               as_json: Annotated[bool, typer.Option("--json", help="A JSON array: one object per hook.")] = False
               ) -> None:
    """List the hooks that would run in this folder: event, matcher, command, timeout and the file."""
    from ..config import load_settings
    from ..surfaces.hooks import hook_specs
    from ..tools.context import resolve_workspace
    from ..tools.hooks import PROJECT_SETTINGS, read_project_hooks
    from ..trust import is_trusted, project_root

    try:
        settings = load_settings({"workspace": workspace}, config_path=config, profile=profile)
        root = resolve_workspace(settings.workspace)
        running = hook_specs(settings, root)
        trusted = is_trusted(root)
        project = project_root(root) / PROJECT_SETTINGS
        idle = [] if trusted else read_project_hooks(project)
    except CrowError as exc:
        raise fail(exc) from None
    rows: list[dict[str, Any]] = [
        {"event": s.event, "matcher": s.matcher, "command": s.command, "timeout_s": s.timeout_s, "source": s.source,
         "runs": True} for s in running]
    rows += [{"event": s.event, "matcher": s.matcher, "command": s.command, "timeout_s": s.timeout_s,
              "source": s.source, "runs": False} for s in idle]
    if as_json:
        print(json.dumps(rows, ensure_ascii=False, indent=2))
        return
    if not rows:
        print("no hooks configured (see docs/hooks.md: [[hooks.EVENT]] in crow's config.toml or the project's "
              f"{PROJECT_SETTINGS})")
        return
    for row in rows:
        matcher = f" [{_judged(row['matcher'])}]" if row["matcher"] else ""
        note = "" if row["runs"] else "  (not run: this folder is not trusted)"
        print(f"{row['event']}{matcher}: {_judged(row['command'])} (timeout {row['timeout_s']:g} s)\n"
              f"  from {strip_controls(row['source'])}{note}")


def _judged(text: str) -> str:
    """A matcher or command as a person judges it (an untrusted repository's too): on one line, its control,
    bidi and zero-width characters shown as escapes (`text.visible`), so it reads as what runs and matches."""
    return visible(text).replace("\n", "\\n").replace("\t", "\\t")
