"""Fixtures of the surface tests: a session store in tmp_path, a folder of tools that nap or need approval."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from crow_cli.sessions import SessionStore
from tests.support import GUARDED_TOOL, tools_folder

APPROVAL_TOOLS = '''
import asyncio
from crow_cli.tools import tool

@tool
async def nap(seconds: float = 0.2, flag: str = "") -> str:
    """Sleep on the event loop, then say so (and create the file `flag`, if given, for a test to wait on).

    Args:
        seconds: how long.
        flag: a path to create once rested.
    """
    await asyncio.sleep(seconds)
    if flag:
        open(flag, "w").close()
    return "rested"
''' + GUARDED_TOOL

@pytest.fixture
def store(tmp_path: Path) -> Iterator[SessionStore]:
    with SessionStore(tmp_path / "sessions.db") as s:
        yield s


@pytest.fixture
def approval_tools(tmp_path: Path) -> Path:
    """A tools folder: `nap(seconds)` (async) and `guarded(text)` (needs approval)."""
    return tools_folder(tmp_path / "approval-tools", APPROVAL_TOOLS)
