"""`!COMMAND` in crow chat: the person's command runs as a `run_shell` call and is shown as they typed it."""

from __future__ import annotations

import json
from pathlib import Path

from crow_cli.events import Event, ToolResultReady, ToolRunStarted
from crow_cli.loop import LoopSettings
from crow_cli.surfaces.shell_escape import run_typed
from crow_cli.tools.approval import Approvals
from crow_cli.tools.context import ToolContext


# `!ls` is shown with its command only, not as run_shell({"command": "ls", "timeout_s": 600.0}), an argument
# the person never typed
async def test_a_typed_command_is_shown_with_its_command_only(tmp_path: Path) -> None:
    events: list[Event] = []
    result = await run_typed("echo hi", Approvals(), LoopSettings(), ToolContext.for_workspace(tmp_path),
                             events.append)
    started, ready = events
    assert isinstance(started, ToolRunStarted) and isinstance(ready, ToolResultReady)
    assert json.loads(started.call.arguments) == {"command": "echo hi"}
    assert result.output == "[exit code 0]\nhi\n"
