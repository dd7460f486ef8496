"""What a plugin tool prints (at import, in its thread or on the loop) goes to stderr, never into stdout."""

from __future__ import annotations

import json

from tests.replay_server import ReplayServer
from tests.tools.cli_helpers import run_crow, script

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


def _run(tmp_path, *mode: str):
    tools = tmp_path / "tools"
    tools.mkdir(exist_ok=True)
    (tools / "noisy.py").write_text(NOISY)
    turns = script([("c1", "noisy_sync", {"x": 1}), ("c2", "noisy_async", {"x": 2})], final="The answer.")
    with ReplayServer(turns) as srv:
        proc = run_crow(["run", "--base-url", srv.base_url, "--model", "m", "--no-session", "--tools-dir",
                         str(tools), *mode, "go"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    for noise in ("NOISE AT IMPORT", "NOISE FROM THREAD", "more noise", "NOISE FROM LOOP", "FD NOISE", "CHILD NOISE"):
        assert noise in proc.stderr and noise not in proc.stdout
    return proc


def test_json_stdout_carries_events_only(tmp_path):
    proc = _run(tmp_path, "--json")
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert events[0]["type"] == "run_started" and events[-1]["final_text"] == "The answer."
    assert sorted(e["result"]["output"] for e in events if e["type"] == "tool_result") == ["x=1", "y=2"]


def test_plain_stdout_carries_the_answer_only(tmp_path):
    assert _run(tmp_path).stdout == "The answer.\n"
