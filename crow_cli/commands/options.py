"""Options shared by several commands, and the one place expected errors become exit codes."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from ..errors import CrowError

__all__ = [
    "ApiKeyOpt", "BaseUrlOpt", "ConfigOpt", "DebugOpt", "ModelOpt", "ProfileOpt", "SystemOpt", "ToolsDirOpt",
    "fail",
]

ModelOpt = Annotated[str | None, typer.Option("--model", "-m", help="Model name (env CROW_MODEL).")]
BaseUrlOpt = Annotated[str | None, typer.Option("--base-url", help="Server URL, e.g. http://127.0.0.1:8080/v1 "
                                                "(env CROW_BASE_URL, OPENAI_BASE_URL).")]
ApiKeyOpt = Annotated[str | None, typer.Option("--api-key", help="API key (env CROW_API_KEY, OPENAI_API_KEY). "
                                               "Never printed or stored.", show_default=False)]
SystemOpt = Annotated[str | None, typer.Option("--system", help="System prompt.")]
ProfileOpt = Annotated[str | None, typer.Option("--profile", help="A [profiles.NAME] table of the config file.")]
ConfigOpt = Annotated[str | None, typer.Option("--config", help="Config file (default: the user config dir).")]
ToolsDirOpt = Annotated[list[str] | None, typer.Option("--tools-dir", help="A folder of plugin tools (repeatable).")]
DebugOpt = Annotated[bool, typer.Option("--debug", help="Trace every tool-call delta; show tracebacks.")]


def fail(exc: CrowError, *, debug: bool = False) -> typer.Exit:
    """Print `exc` as one line on stderr (plus its traceback with --debug); the Exit to raise."""
    print(f"crow: error: {exc}", file=sys.stderr)
    if debug:
        import traceback

        traceback.print_exception(exc, file=sys.stderr)
    return typer.Exit(exc.exit_code)
