"""What a plugin tool prints (at import, in its thread or on the loop) goes to stderr, never into stdout."""

from __future__ import annotations

import json

from tests.replay_server import ReplayServer
from tests.support import crow, run_here, script

NOISY = '''
import os
import subprocess
import sys
from crow_cli.tools import tool

print("NOISE AT IMPORT")


@tool
def noisy_sync(x: int) -> str:
    """Prints from its worker thread."""
    print("NOISE FROM THREAD")
    sys.stdout.write("more noise\\n")
    return f"x={x}"


@tool
async def noisy_async(x: int) -> str:
    """Prints on the event loop."""
    print("NOISE FROM LOOP")
    # issue 11 item 6 (found trying it as a new user): writes to fd 1 itself, and a child's output
    os.write(1, b"FD NOISE\\n")
    subprocess.run(["echo", "CHILD NOISE"], check=True)
    return f"y={x}"
'''


def _tools(tmp_path):
    tools = tmp_path / "tools"
    tools.mkdir(exist_ok=True)
    (tools / "noisy.py").write_text(NOISY)
    return tools


TURNS = script([("c1", "noisy_sync", {"x": 1}), ("c2", "noisy_async", {"x": 2})], final="The answer.")
PRINTED = ("NOISE AT IMPORT", "NOISE FROM THREAD", "more noise", "NOISE FROM LOOP")
"""What the plugin prints through `sys.stdout`; it also writes to descriptor 1 itself and starts a child that does."""


def test_json_stdout_carries_events_only(tmp_path):
    # a crow process: only there is descriptor 1 the real stdout (`stdout.private_stdout`), whatever the mode
    with ReplayServer(TURNS) as srv:
        proc = crow("run", "--base-url", srv.base_url, "--model", "m", "--no-session", "--tools-dir",
                    str(_tools(tmp_path)), "--json", "go", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for noise in (*PRINTED, "FD NOISE", "CHILD NOISE"):
        assert noise in proc.stderr and noise not in proc.stdout
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert events[0]["type"] == "run_started" and events[-1]["final_text"] == "The answer."
    assert sorted(e["result"]["output"] for e in events if e["type"] == "tool_result") == ["x=1", "y=2"]


async def test_plain_stdout_carries_the_answer_only(tmp_path):
    # in process (`run_here`): what goes through sys.stdout; descriptor 1 is the test process's here
    ran = await run_here(TURNS, "go", model="m", session=False, tools_dirs=(str(_tools(tmp_path)),), cwd=tmp_path)
    assert ran.code == 0, ran.stderr
    for noise in PRINTED:
        assert noise in ran.stderr and noise not in ran.stdout
    assert ran.stdout == "The answer.\n"
