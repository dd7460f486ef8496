"""What a command's flags say about a surface's runs beyond `Settings`: one record, the same for every surface.

`crow_cli.commands` builds it once per command (`commands.options.surface_options`); a surface embeds
it in its own options (`RunOptions.surface`, `ChatOptions.surface`) or takes it as they are (`crow acp`,
`crow mcp`), and passes it whole to `Runtime`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SurfaceOptions"]


@dataclass(frozen=True)
class SurfaceOptions:
    """The flags every surface shares: where tools come from, approval, tracing, recording, AGENTS.md."""

    tools_dirs: tuple[str, ...] = ()
    """`--tools-dir` folders, after the config's `tool_paths`."""
    no_tools: bool = False
    """Offer no tools (and start no MCP server)."""
    yes: bool = False
    """`--yes`: approve every tool call without asking (policy yolo; ACP's start mode, MCP's server policy)."""
    debug: bool = False
    """Trace deltas and request adaptations; MCP servers' stderr shown."""
    record_dir: str | None = None
    """`--record`: the raw exchanges go to this folder."""
    project_instructions: bool = True
    """Put AGENTS.md files into the system prompt of new sessions (`--no-project-instructions` turns it off)."""
    modes_given: frozenset[str] = frozenset()
    """The modes a flag named (`approval`: `--approval` or `--yes`; `sandbox`: `--sandbox`): a continued
    session may be loosened to those (`persist.kept_modes`), never to the config's."""
