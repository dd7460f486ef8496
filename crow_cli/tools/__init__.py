"""Tools the model can call, and the API for writing one (a plugin tool).

`__all__` is the plugin API: what a plugin module may import from `crow_cli.tools` (a test guards it):

- `tool`: the decorator making a `Tool` of a typed function (`@tool` or `@tool(needs_approval=True, ...)`);
- `Tool`: the tool object (`kind`, `preview`, `subject`, `needs_approval`, `parallel`, `timeout_s`);
- `ToolError`: raise it for an error the model should read (`Error: ...`);
- `ToolFailed(message, output=None)`: raise it when the tool ran and failed (a check that found problems): the
  model reads `output` (else `message`) as it is, and every surface shows the call failed;
- `ToolContext`: declare a parameter of this type to receive the run's workspace and secrets;
- `resolve_in_workspace(path)`: a path confined to the workspace (raises `OutsideWorkspace`, a `ToolError`);
- `workspace_root()`: the workspace folder of the running call;
- `Image(data, mime_type="", name="")`: return one (or a list of `str` and `Image` parts) to show the model an
  image: the tool message names it, a vision model sees it after the turn's tool results.

A plugin tool in a few lines (a file in a tools folder, or a module behind a `crow_cli.tools`
entry point)::

    from crow_cli.tools import tool

    @tool
    def shout(text: str) -> str:
        '''Upper-case some text.

        Args:
            text: what to shout.
        '''
        return text.upper()
"""

from ..errors import OutsideWorkspace, ToolError, ToolFailed
from ..images import Image
from .context import ToolContext
from .tool import Tool, tool
from .workspace import resolve_in_workspace, workspace_root

__all__ = ["Image", "OutsideWorkspace", "Tool", "ToolContext", "ToolError", "ToolFailed", "resolve_in_workspace",
           "tool", "workspace_root"]
