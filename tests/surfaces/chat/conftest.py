"""Fixtures of the chat tests: a tools folder with a call that presses Ctrl-C, a quick one and a guarded one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import GUARDED_TOOL, tools_folder

SLOW_TOOLS = '''
import asyncio, os, signal
from crow_cli.tools import tool

QUICK_DONE = asyncio.Event()  # the other call has its result: an event, not a time margin

@tool
async def slow(seconds: float = 30) -> str:
    """Press Ctrl-C (a real SIGINT to this process) once the quick call is done, then sleep.

    Args:
        seconds: how long to sleep.
    """
    await QUICK_DONE.wait()
    QUICK_DONE.clear()
    for _ in range(10):  # let the run take the quick result in (loop steps, not seconds)
        await asyncio.sleep(0)
    os.kill(os.getpid(), signal.SIGINT)
    await asyncio.sleep(seconds)
    return "finished"

@tool
async def quick(text: str) -> str:
    """Echo text.

    Args:
        text: what to echo.
    """
    QUICK_DONE.set()
    return "echo: " + text
''' + GUARDED_TOOL


@pytest.fixture
def tools_dir(tmp_path: Path) -> Path:
    return tools_folder(tmp_path / "testtools", SLOW_TOOLS)
