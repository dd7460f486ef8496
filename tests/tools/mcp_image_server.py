"""An MCP server (stdio) whose tools return images, for the tests: `python mcp_image_server.py`."""

from __future__ import annotations

from mcp.server.mcpserver import Image, MCPServer
from mcp.types import ImageContent, TextContent, ToolAnnotations

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 24

server = MCPServer("images", log_level="WARNING")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def snapshot(caption: str) -> list[TextContent | ImageContent]:
    """A caption and a (tiny) PNG."""
    return [TextContent(type="text", text=caption), Image(data=PNG, format="png").to_image_content()]


if __name__ == "__main__":
    server.run()
