"""`crow mcp`: serve crow as a Model Context Protocol server on stdin/stdout, for other agents."""

from __future__ import annotations

import typer

from ..errors import CrowError
from .options import RunFlags, check_before_start, fail, served_model, with_run_flags

__all__ = ["mcp"]


@with_run_flags()
def mcp(*, flags: RunFlags) -> None:
    """Be an MCP server for other agents and MCP clients (Claude Desktop, Cursor, Codex): JSON-RPC on stdin/stdout.

    Tools: crow_run (a prompt; optional cwd, model, approval, sandbox, never looser than these options)
    and crow_reply (a session_id and a prompt). Approvals are asked of the client where it supports
    elicitation, otherwise refused.
    """
    from ..surfaces.mcp_server import serve_mcp

    try:
        settings = served_model(flags.settings())  # a custom server's own model when none is named
        check_before_start(settings, yes=flags.yes)
        options = flags.surface()
        import asyncio  # not at import time: `crow --version` does without it

        code = asyncio.run(serve_mcp(settings, options))
    except CrowError as exc:
        raise fail(exc, debug=flags.debug) from None
    raise typer.Exit(code)
