"""Tools the model can call: the registry, the `@tool` decorator, built-ins and plugin loading.

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

from .registry import Tool, ToolRegistry, tool

__all__ = ["Tool", "ToolRegistry", "tool"]
