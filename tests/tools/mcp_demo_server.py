"""A small MCP server (stdio) for the tests, written with the official `mcp` package's MCPServer (FastMCP in v1).

Run: `python mcp_demo_server.py [SERVER_NAME] [--http PORT]` (stdio, or streamable HTTP at
`http://127.0.0.1:PORT/mcp`). It writes its working directory to `$DEMO_CWD_FILE`
when that is set, so a test can check where it was started.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer(sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else "demo",
                   log_level="WARNING")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def shout(text: str) -> str:
    """Upper-case some text (read-only)."""
    return text.upper()


@server.tool()
def fail(reason: str = "no reason") -> str:
    """Always fails with the given reason."""
    raise ValueError(reason)


@server.tool()
def crash() -> str:
    """Kills the server process mid-call (the connection is lost)."""
    os._exit(1)


@server.tool()
def read_file(path: str) -> str:
    """A tool whose name collides with a built-in."""
    return f"mcp read {path}"


if __name__ == "__main__":
    if os.environ.get("DEMO_CWD_FILE"):
        Path(os.environ["DEMO_CWD_FILE"]).write_text(os.getcwd())
    if "--http" in sys.argv:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[sys.argv.index("--http") + 1]))
    else:
        server.run()
