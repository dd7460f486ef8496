"""The `skill` tool: the model loads one of the run's skills (`crow_cli.skills`) by name.

Offered only when the run has skills (the runtime registers it then, with the built-ins' source); it reads
the skill's SKILL.md now and answers with its instructions and the list of its folder's other files, which
`read_file` may read even outside the workspace (`workspace.resolve_for_read`). It only reads: no approval.
"""

from __future__ import annotations

from ...errors import ConfigError, ToolError
from ...skills import load_skill
from ..context import ToolContext
from ..tool import tool

__all__ = ["skill"]


@tool(kind="read")
def skill(name: str, context: ToolContext) -> str:
    """Load a skill listed in the system prompt: its instructions, then the files of its folder (read them with
    read_file). Load a skill before a task its description matches, and follow its instructions.

    Args:
        name: the skill's name, as listed.
    """
    skills = context.skills
    found = skills.get(name) if skills is not None else None
    if found is None:
        known = ", ".join(s.name for s in skills.found) if skills is not None else ""
        raise ToolError(f"no skill is named {name!r}; "
                        + (f"the skills are: {known}" if known else "there are none here"))
    try:
        return load_skill(found, context.workspace, context.secrets)
    except ConfigError as exc:
        raise ToolError(str(exc)) from None
