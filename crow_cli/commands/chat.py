"""`crow chat`: an interactive chat, recorded as a session."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from ..errors import CrowError
from .options import ApiKeyOpt, BaseUrlOpt, ConfigOpt, DebugOpt, ModelOpt, ProfileOpt, SystemOpt, ToolsDirOpt, fail

__all__ = ["chat"]


def chat(
    resume: Annotated[str | None, typer.Option(
        "--resume", "-r", is_flag=False, flag_value="", metavar="[ID]",
        help="Continue a session: the most recent one, or the one with this id.")] = None,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    api_key: ApiKeyOpt = None,
    system: SystemOpt = None,
    max_turns: Annotated[int | None, typer.Option("--max-turns", help="Model turns per message before stopping "
                                                  "[default: 25].")] = None,
    tools_dir: ToolsDirOpt = None,
    no_tools: Annotated[bool, typer.Option("--no-tools", help="Offer the model no tools.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Approve every tool call without asking.")] = False,
    no_session: Annotated[bool, typer.Option("--no-session", help="Do not record this chat.")] = False,
    profile: ProfileOpt = None,
    config: ConfigOpt = None,
    debug: DebugOpt = False,
) -> None:
    """Chat with the model in the terminal; type /help for commands. Sessions are kept (crow sessions)."""
    from ..config import load_settings
    from ..surfaces.chat import ChatOptions, run_chat

    try:
        settings = load_settings(
            {"model": model, "base_url": base_url, "api_key": api_key, "system": system, "max_turns": max_turns},
            config_path=config, profile=profile,
        )
        options = ChatOptions(tools_dirs=tuple(tools_dir or ()), no_tools=no_tools, yes=yes, debug=debug,
                              resume=resume, session=not no_session)
        code = asyncio.run(run_chat(settings, options))
    except CrowError as exc:
        raise fail(exc, debug=debug) from None
    raise typer.Exit(code)
