"""`crow acp`: serve the Agent Client Protocol on stdin/stdout for an editor."""

from __future__ import annotations

import typer

from ..errors import CrowError
from .options import RunFlags, fail, served_model, with_run_flags

__all__ = ["acp"]


@with_run_flags(omit=("workspace",))
def acp(*, flags: RunFlags) -> None:
    """Be an Agent Client Protocol agent for an editor (Zed, JetBrains, Neovim): JSON-RPC on stdin/stdout.

    The workspace of each session is the folder the editor names; sessions are crow sessions.
    """
    from ..surfaces.acp import serve_acp

    try:
        settings = served_model(flags.settings())  # a custom server's own model when none is named
        from ..surfaces.approve import approver_for

        # checked before stdin is looked at: bad options are the error said, not the pipes
        approver_for(settings, yes=flags.yes)
        options = flags.surface()
        import asyncio  # not at import time: `crow --version` does without it

        code = asyncio.run(serve_acp(settings, options))
    except CrowError as exc:
        raise fail(exc, debug=flags.debug) from None
    raise typer.Exit(code)
