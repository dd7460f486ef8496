"""`crow acp`: serve the Agent Client Protocol on stdin/stdout for an editor."""

from __future__ import annotations

import typer

from ..errors import CrowError
from .options import (
    AllowOpt,
    ApiKeyOpt,
    ApprovalOpt,
    BaseUrlOpt,
    ConfigOpt,
    DebugOpt,
    DenyOpt,
    MaxTurnsOpt,
    ModelOpt,
    NoDefaultPromptOpt,
    NoProjectInstructionsOpt,
    NoToolsOpt,
    ProfileOpt,
    SandboxOpt,
    SystemFileOpt,
    SystemOpt,
    ToolsDirOpt,
    YesOpt,
    fail,
    surface_options,
)

__all__ = ["acp"]


def acp(
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
    sandbox: SandboxOpt = None,
    profile: ProfileOpt = None,
    config: ConfigOpt = None,
    debug: DebugOpt = False,
    no_project_instructions: NoProjectInstructionsOpt = False,
) -> None:
    """Be an Agent Client Protocol agent for an editor (Zed, JetBrains, Neovim): JSON-RPC on stdin/stdout.

    The workspace of each session is the folder the editor names; sessions are crow sessions.
    """
    from ..config import load_settings
    from ..surfaces.acp import serve_acp

    try:
        settings = load_settings(
            {"model": model, "base_url": base_url, "api_key": api_key, "system": system,
             "system_prompt_file": system_file,
             "default_prompt": False if no_default_prompt else None, "max_turns": max_turns,
             "approval": approval, "allow": allow, "deny": deny, "sandbox": sandbox},
            config_path=config, profile=profile,
        )
        from ..tools.approval import make_approver

        # checked now, not at the first session/new: the policy (or the ACP mode read-only) and the rules
        make_approver(None if settings.approval == "read-only" else settings.approval, allow=settings.allow,
                      deny=settings.deny, yes=yes)
        options = surface_options(tools_dir, no_tools=no_tools, yes=yes, debug=debug,
                                  no_project_instructions=no_project_instructions)
        import asyncio  # not at import time: `crow --version` does without it

        code = asyncio.run(serve_acp(settings, options))
    except CrowError as exc:
        raise fail(exc, debug=debug) from None
    raise typer.Exit(code)
