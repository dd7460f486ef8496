"""Helpers of the tools tests: driving `.venv/bin/crow` as a subprocess against the replay server, and
watching processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import chunk, sse, text_sse, tool_delta

CROW = Path(sys.executable).with_name("crow")
HERE = Path(__file__).resolve().parent


def tool_calls_sse(*calls: tuple[str, str, dict[str, Any]]) -> str:
    """One streamed turn calling `(id, name, arguments)` tools, in order, then finish_reason tool_calls."""
    chunks = [chunk({"role": "assistant", "content": None})]
    for index, (call_id, name, arguments) in enumerate(calls):
        text = json.dumps(arguments)
        chunks.append(chunk({"tool_calls": [tool_delta(index, call_id, name, text[: len(text) // 2])]}))
        chunks.append(chunk({"tool_calls": [tool_delta(index, arguments=text[len(text) // 2 :])]}))
    chunks.append(chunk({}, "tool_calls"))
    return sse(*chunks)


def script(*turns: list[tuple[str, str, dict[str, Any]]], final: str = "All done.") -> list[dict[str, Any]]:
    """A replay script: one tool-call turn per item of `turns`, then a text answer."""
    return [{"sse": tool_calls_sse(*calls)} for calls in turns] + [{"sse": text_sse(final)}]


def run_crow(args: list[str], cwd: Path, *, stdin: str | None = None,
             timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run `crow ARGS` in `cwd` (stdin not a terminal), capturing text output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CROW_", "OPENAI_"))}
    return subprocess.run([str(CROW), *args], cwd=cwd, env=env, input=stdin if stdin is not None else "",
                          capture_output=True, text=True, timeout=timeout)


def tool_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in request["messages"] if m["role"] == "tool"]


def alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (dead, not yet reaped by its parent) counts as gone
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
