"""`crow tools [--json]`: what the model would be offered, from where, and what cannot be offered and why."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated, Any, TextIO

import typer

from ..errors import CrowError
from ..text import strip_controls
from .options import ConfigOpt, ProfileOpt, ToolsDirOpt, check_tools_dirs, fail

if TYPE_CHECKING:
    from ..config import Settings
    from ..tools.tool import Tool

__all__ = ["tools"]


def tools(tools_dir: ToolsDirOpt = None, profile: ProfileOpt = None, config: ConfigOpt = None,
          as_json: Annotated[bool, typer.Option("--json", help="A JSON array: one object per tool, "
                                                "schema and whether it is usable.")] = False) -> None:
    """List every tool the model would be offered, with where it comes from (and those that cannot be)."""
    import contextlib

    from ..config import load_settings
    from ..stdout import private_stdout

    try:
        settings = load_settings({}, config_path=config, profile=profile)
        check_tools_dirs(tools_dir)
    except CrowError as exc:
        raise fail(exc) from None
    # a plugin's import-time print or os.write(1, …) lands on stderr: stdout carries the listing only
    with private_stdout() as out, contextlib.redirect_stdout(sys.stderr):
        _list(settings, tools_dir, as_json, out)


def _list(settings: Settings, tools_dir: list[str] | None, as_json: bool, out: TextIO) -> None:
    from ..surfaces.task import Subagents
    from ..tools.registry import default_registry

    registry = default_registry((*settings.tool_paths, *(tools_dir or ())))
    registry.register(Subagents(lambda: settings).tool, source="builtin")  # as every run offers it
    if settings.mcp_servers:  # listing needs the servers: start them, list, stop them
        import asyncio

        from ..surfaces.runtime import list_mcp_tools

        try:
            stopped = asyncio.run(list_mcp_tools(settings, registry))
        except CrowError as exc:
            raise fail(exc) from None
        if stopped is not None:  # a signal: the servers are stopped, end as crow run ends
            print(f"crow: {stopped.error}", file=sys.stderr)
            raise typer.Exit(stopped.exit_code)
    # dropped as `crow run` drops them; the built-ins' schemas are known good (a test derives them)
    derived = registry.schemas(None if as_json else (lambda t: t.source != "builtin"))
    schemas = {s["function"]["name"]: s["function"]["parameters"] for s in derived}
    dropped = {registry.dropped_line(name) for name in registry.unusable}
    if as_json:
        rows = [_row(t, schemas.get(t.name), None) for t in registry]
        rows += [_row(t, None, why) for t, why in registry.unusable.values()]
        print(json.dumps(rows, ensure_ascii=False, indent=2), file=out)
    else:
        # every string here comes from a plugin or an MCP server: no control character reaches a terminal
        everything = [*registry, *(t for t, _ in registry.unusable.values())]
        width = max((len(strip_controls(t.name)) for t in everything), default=4)
        for t in registry:
            flags = " [needs approval]" if t.needs_approval else ""
            print(f"{strip_controls(t.name):<{width}}  {_summary(t.description)}\n{'':<{width}}  "
                  f"source: {strip_controls(t.source)}{flags}", file=out)
        if registry.unusable:
            print("\nunusable (not offered to the model):", file=out)
            for t, why in registry.unusable.values():
                print(f"{strip_controls(t.name):<{width}}  {_summary(t.description)}\n{'':<{width}}  "
                      f"source: {strip_controls(t.source)}; {strip_controls(why)}", file=out)
    for problem in registry.errors:
        if problem not in dropped:  # said in the listing
            print(f"crow: warning: {strip_controls(problem)}", file=sys.stderr)


def _summary(description: str) -> str:
    lines = description.strip().splitlines()
    return strip_controls(lines[0]) if lines else ""


def _row(t: Tool, parameters: dict[str, Any] | None, problem: str | None) -> dict[str, Any]:
    return {"name": t.name, "description": t.description, "source": t.source, "kind": t.kind,
            "needs_approval": t.needs_approval, "parallel": t.parallel, "usable": problem is None,
            "problem": problem, "parameters": parameters}
