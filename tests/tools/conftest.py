"""Fixtures of the tools tests: running tools against a temporary workspace."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from crow_cli.tools.context import ToolContext, using_context
from crow_cli.tools.sandbox import Sandbox


@pytest.fixture
def enter_workspace() -> Iterator[Callable[..., ToolContext]]:
    """`enter_workspace(root, secrets=(), sandbox=None)`: tools called directly in this test see `root` as the workspace
    (as dispatch makes a run's context current for each call), until the test ends."""
    with contextlib.ExitStack() as stack:
        def enter(root: Path, secrets: tuple[str, ...] = (), sandbox: Sandbox | None = None) -> ToolContext:
            return stack.enter_context(using_context(ToolContext(Path(root).resolve(), secrets,
                                                                 sandbox or Sandbox())))

        yield enter


@pytest.fixture
def ws(tmp_path: Path, enter_workspace: Callable[..., ToolContext]) -> Path:
    """A temporary folder made the workspace of this test."""
    enter_workspace(tmp_path)
    return tmp_path
