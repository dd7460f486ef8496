"""`crow chat`: an interactive chat, recorded as a session."""

from __future__ import annotations

from typing import Annotated

import typer

from ..errors import ConfigError, CrowError
from .options import (
    AllowOpt,
    ApiKeyOpt,
    ApprovalOpt,
    BaseUrlOpt,
    ConfigOpt,
    DebugOpt,
    DenyOpt,
    LocalModelOpt,
    LocalOpt,
    MaxTurnsOpt,
    ModelOpt,
    NoDefaultPromptOpt,
    NoProjectInstructionsOpt,
    NoSessionOpt,
    NoToolsOpt,
    ProfileOpt,
    SandboxOpt,
    SystemFileOpt,
    SystemOpt,
    ToolsDirOpt,
    WorkspaceOpt,
    YesOpt,
    check_before_start,
    fail,
    surface_options,
)

__all__ = ["chat"]


def chat(
    session_id: Annotated[str | None, typer.Argument(metavar="ID", show_default=False,
                                                     help="With --resume: the session to continue.")] = None,
    resume: Annotated[bool, typer.Option("--resume", "-r", help="Continue a session: the one with id ID, or "
                                         "the most recent one.")] = False,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    api_key: ApiKeyOpt = None,
    system: SystemOpt = None,
    system_file: SystemFileOpt = None,
    no_default_prompt: NoDefaultPromptOpt = False,
    max_turns: MaxTurnsOpt = None,
    tools_dir: ToolsDirOpt = None,
    no_tools: NoToolsOpt = False,
    yes: YesOpt = False,
    approval: ApprovalOpt = None,
    allow: AllowOpt = None,
    deny: DenyOpt = None,
    workspace: WorkspaceOpt = None,
    sandbox: SandboxOpt = None,
    no_session: NoSessionOpt = False,
    profile: ProfileOpt = None,
    config: ConfigOpt = None,
    debug: DebugOpt = False,
    local: LocalOpt = False,
    local_model: LocalModelOpt = None,
    no_project_instructions: NoProjectInstructionsOpt = False,
) -> None:
    """Chat with the model in the terminal; type /help for commands. Sessions are kept (crow sessions)."""
    from ..config import load_settings
    from ..surfaces.chat.app import ChatOptions, run_chat

    try:
        if resume and (system_file is not None or no_default_prompt):
            raise ConfigError(f"{'--system-file' if system_file is not None else '--no-default-prompt'} cannot change "
                              "the system prompt of a resumed session; start a new chat for a new one")
        if session_id is not None and not resume:
            raise ConfigError(f"unexpected argument {session_id!r}: to continue a session, use --resume {session_id}")
        if session_id is not None and not session_id.strip():
            raise ConfigError("--resume needs a session id, or none for the most recent session")
        settings = load_settings(
            {"model": model, "base_url": base_url, "api_key": api_key, "system": system,
             "system_prompt_file": system_file,
             "default_prompt": False if no_default_prompt else None, "max_turns": max_turns,
             "approval": approval, "allow": allow, "deny": deny, "workspace": workspace,
             "sandbox": sandbox, "local_model": local_model},
            config_path=config, profile=profile,
        )
        check_before_start(settings, yes=yes, local=local or bool(local_model))
        surface = surface_options(tools_dir, no_tools=no_tools, yes=yes, debug=debug,
                                  no_project_instructions=no_project_instructions)
        options = ChatOptions(surface=surface, resume=(session_id or "") if resume else None, session=not no_session,
                              system=system)
        import asyncio  # not at import time: `crow tools` and `--help` do without it

        from ..local import local_session  # start, then stop, the local server

        with local_session(settings, enabled=local or bool(local_model)) as settings:
            code = asyncio.run(run_chat(settings, options))
    except CrowError as exc:
        raise fail(exc, debug=debug) from None
    raise typer.Exit(code)
