"""`crow prompt`: the system message a new `crow run` here would send, printed; nothing is sent anywhere."""

from __future__ import annotations

from typing import Annotated

import typer

from ..errors import CrowError
from .options import (
    ApprovalOpt,
    ConfigOpt,
    NoDefaultPromptOpt,
    NoToolsOpt,
    ProfileOpt,
    SandboxOpt,
    SystemFileOpt,
    SystemOpt,
    ToolsDirOpt,
    WorkspaceOpt,
    fail,
    surface_options,
)

__all__ = ["prompt"]


def prompt(system: SystemOpt = None, system_file: SystemFileOpt = None, no_default_prompt: NoDefaultPromptOpt = False,
           approval: ApprovalOpt = None, sandbox: SandboxOpt = None, workspace: WorkspaceOpt = None,
           tools_dir: ToolsDirOpt = None, no_tools: NoToolsOpt = False,
           no_project_instructions: Annotated[bool, typer.Option("--no-project-instructions", help="Leave the "
                                                                 "AGENTS.md files out.")] = False,
           profile: ProfileOpt = None, config: ConfigOpt = None) -> None:
    """Print the system message a new crow run here would send (built-in prompt, --system, AGENTS.md)."""
    from ..config import load_settings
    from ..surfaces.common import warning_to
    from ..surfaces.runtime import Runtime
    from ..text import strip_controls

    try:
        settings = load_settings(
            {"system": system, "system_prompt_file": system_file,
             "default_prompt": False if no_default_prompt else None, "approval": approval, "sandbox": sandbox,
             "workspace": workspace},
            config_path=config, profile=profile)
        runtime = Runtime(settings, surface_options(tools_dir, no_tools=no_tools,
                                                    no_project_instructions=no_project_instructions),
                          warn=warning_to())  # a skipped AGENTS.md
    except CrowError as exc:
        raise fail(exc) from None
    warn = warning_to()
    for problem in runtime.registry.errors if runtime.registry is not None else ():
        warn(problem)  # a tools folder that is not there: its tools' hints are missing from what is printed
    text = runtime.settings.system
    if not text:
        # a file replaces the built-in prompt whatever --no-default-prompt says; only --system "" drops it
        # an empty file was said by the runtime (a warning, as in run and chat)
        why = ("" if settings.system_prompt_file and settings.system != ""
               else ": --no-default-prompt or --system \"\"")
        typer.echo(f"(no system prompt{why}, and no AGENTS.md)", err=True)
        return
    typer.echo(strip_controls(text))
