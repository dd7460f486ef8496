"""`crow tools`: what the model would be offered, and from where."""

from __future__ import annotations

import sys

from ..errors import CrowError
from .options import ConfigOpt, ProfileOpt, ToolsDirOpt, fail

__all__ = ["tools"]


def tools(tools_dir: ToolsDirOpt = None, profile: ProfileOpt = None, config: ConfigOpt = None) -> None:
    """List every tool the model would be offered, with where it comes from."""
    from ..config import load_settings
    from ..tools.registry import default_registry

    try:
        settings = load_settings({}, config_path=config, profile=profile)
    except CrowError as exc:
        raise fail(exc) from None
    registry = default_registry((*settings.tool_paths, *(tools_dir or ())))
    if settings.mcp_servers:  # listing needs the servers: start them, list, stop them
        import asyncio

        from ..tools.mcp import McpServers

        async def add_mcp_tools() -> None:
            async with McpServers(settings.mcp_servers) as servers:
                await servers.register_tools(registry)

        try:
            asyncio.run(add_mcp_tools())
        except CrowError as exc:
            raise fail(exc) from None
    width = max((len(t.name) for t in registry), default=4)
    for t in registry:
        flags = " [needs approval]" if t.needs_approval else ""
        summary = t.description.strip().splitlines()[0] if t.description.strip() else ""
        print(f"{t.name:<{width}}  {summary}\n{'':<{width}}  source: {t.source}{flags}")
    for problem in registry.errors:
        print(f"crow: warning: {problem}", file=sys.stderr)
