"""`crow mcp`: serve crow as a Model Context Protocol server on stdin/stdout, for other agents."""

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
    WorkspaceOpt,
    YesOpt,
    check_before_start,
    fail,
    surface_options,
)

__all__ = ["mcp"]


def mcp(
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
    profile: ProfileOpt = None,
    config: ConfigOpt = None,
    debug: DebugOpt = False,
    no_project_instructions: NoProjectInstructionsOpt = False,
) -> None:
    """Be an MCP server for other agents and MCP clients (Claude Desktop, Cursor, Codex): JSON-RPC on stdin/stdout.

    Tools: crow_run (a prompt; optional cwd, model, approval, sandbox, never looser than these options)
    and crow_reply (a session_id and a prompt). Approvals are asked of the client where it supports
    elicitation, otherwise refused.
    """
    from ..config import load_settings
    from ..surfaces.mcp_server import serve_mcp

    try:
        settings = load_settings(
            {"model": model, "base_url": base_url, "api_key": api_key, "system": system,
             "system_prompt_file": system_file, "default_prompt": False if no_default_prompt else None,
             "max_turns": max_turns, "approval": approval, "allow": allow, "deny": deny, "workspace": workspace,
             "sandbox": sandbox},
            config_path=config, profile=profile,
        )
        check_before_start(settings, yes=yes)
        options = surface_options(tools_dir, no_tools=no_tools, yes=yes, debug=debug,
                                  no_project_instructions=no_project_instructions)
        import asyncio  # not at import time: `crow --version` does without it

        code = asyncio.run(serve_mcp(settings, options))
    except CrowError as exc:
        raise fail(exc, debug=debug) from None
    raise typer.Exit(code)
