"""Tools the model can call, and the API for writing one (a plugin tool).

`__all__` is the plugin API: what a plugin module may import from `crow_cli.tools` (a test guards it);
docs/tools.md tells each name. A plugin tool in a few lines (a file in a tools folder, or a module behind a
`crow_cli.tools` entry point)::

    from crow_cli.tools import tool

    @tool
    def shout(text: str) -> str:
        '''Upper-case `text`.'''
        return text.upper()
"""

from ..errors import OutsideWorkspace, ToolError, ToolFailed
from ..images import Image
from .context import ToolContext
from .tool import Tool, tool
from .workspace import resolve_in_workspace, workspace_root

__all__ = ["Image", "OutsideWorkspace", "Tool", "ToolContext", "ToolError", "ToolFailed", "resolve_in_workspace",
           "tool", "workspace_root"]
