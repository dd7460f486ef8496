"""`crow run` on a terminal: what the plain surface shows on stderr around an approval question."""

from __future__ import annotations

import re
import time
from pathlib import Path

from tests.replay_server import ReplayServer
from tests.surfaces.chat_terminal import ChatTerminal
from tests.surfaces.conftest import tools_folder
from tests.tools.cli_helpers import script

TOOLS = '''
import asyncio, pathlib
from crow_cli.tools import tool

@tool
async def fetch(marker: str) -> str:
    """Finish while the question waits: once `marker.go` exists, leave `marker`."""
    while not pathlib.Path(marker + ".go").exists():
        await asyncio.sleep(0.01)
    pathlib.Path(marker).write_text("done")
    return "fetched"

@tool(needs_approval=True)
def guarded(text: str) -> str:
    """Needs approval."""
    return "guarded ran: " + text
'''


def test_no_progress_line_lands_on_the_approval_question(tmp_path: Path) -> None:
    # issue 11 item 11 (found trying it as a new user): "✓ fetch" was printed onto the question line,
    # so it read as if the guarded tool had already run
    tools = tools_folder(tmp_path / "run-tools", TOOLS)
    marker = tmp_path / "fetched"
    turns = script([("c1", "guarded", {"text": "x"}), ("c2", "fetch", {"marker": str(marker)})], final="Done.")
    with ReplayServer(turns) as server, ChatTerminal(
            ["--base-url", server.base_url, "--api-key", "sk-test", "--model", "m", "--no-session",
             "--tools-dir", str(tools), "go"], cwd=tmp_path, command="run", stderr_on_terminal=True) as term:
        term.expect("Allow guarded?")
        (tmp_path / "fetched.go").write_text("")
        deadline = time.monotonic() + 20
        while not marker.exists() and time.monotonic() < deadline:  # fetch has finished (bounds a hang only)
            time.sleep(0.02)
        term.send("y\r")
        term.expect("Done.")
        assert term.wait() == 0
        screen = term.screen()
    question = next(line for line in screen.splitlines() if "Allow guarded?" in line)
    assert re.fullmatch(r".*for guarded:\s*y?\s*", question), screen  # only the typed answer follows it
    assert "✓ fetch" in screen.split("Allow guarded?")[1], screen  # shown after the answer


def test_system_cannot_silently_stay_unchanged_on_a_continued_session(tmp_path: Path) -> None:
    # issue 11 item 9 (found trying it as a new user): `crow run -c --system NEW` kept the old system prompt
    from tests.conftest import text_sse
    from tests.scripting.scripting_support import run_crow

    first = run_crow([{"sse": text_sse("One.")}], "--system", "OLD", "hi", cwd=tmp_path)
    assert first.code == 0, first.stderr
    changed = run_crow([{"sse": text_sse("Two.")}], "-c", "--system", "NEW", "again", cwd=tmp_path)
    assert changed.code == 2 and changed.requests == []
    assert changed.stderr.count("\n") == 1 and "--system cannot change the system prompt" in changed.stderr
    same = run_crow([{"sse": text_sse("Three.")}], "-c", "--system", "OLD", "again", cwd=tmp_path)
    assert same.code == 0 and same.requests[0]["messages"][0] == {"role": "system", "content": "OLD"}
