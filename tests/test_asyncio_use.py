"""No `asyncio.wait_for` in crow_cli: on Python 3.11 (which crow supports) it swallows a cancellation that comes
in the same loop iteration as the awaited thing completes, and returns its result instead (CPython gh-86296, fixed
in 3.12 by rebuilding it on `asyncio.timeout`). `async with asyncio.timeout(s): await x` does what it did.

Found by a stress run of `crow tools` stopped by SIGTERM while an MCP server started (4 runs in 150 listed on
forever: the SIGTERM came as the server's initialize was answered, `ensure_started`'s wait_for returned the client
and the listing went on with its cancellation lost). The same held for run_shell's wait for its command (a Ctrl-C
as the command ended was lost) and the probe's requests.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def wait_for_calls(path: Path, text: str | None = None) -> list[str]:
    """`file:line` of every `asyncio.wait_for` (or a bare `wait_for` imported from asyncio) in `path`."""
    tree = ast.parse(path.read_text() if text is None else text)
    imported = any(isinstance(n, ast.ImportFrom) and n.module == "asyncio"
                   and any(a.name == "wait_for" for a in n.names) for n in ast.walk(tree))
    found = []
    for node in ast.walk(tree):
        attribute = (isinstance(node, ast.Attribute) and node.attr == "wait_for" and isinstance(node.value, ast.Name)
                     and node.value.id == "asyncio")
        if attribute or (imported and isinstance(node, ast.Name) and node.id == "wait_for"):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_crow_cli_uses_asyncio_timeout_not_wait_for() -> None:
    assert [hit for path in sorted((ROOT / "crow_cli").rglob("*.py")) for hit in wait_for_calls(path)] == []


def test_the_check_catches_what_it_names() -> None:
    path = ROOT / "crow_cli" / "x.py"
    assert wait_for_calls(path, "import asyncio\nasync def f(x):\n    await asyncio.wait_for(x, 1)\n") == [
        "crow_cli/x.py:3"]
    assert wait_for_calls(path, "from asyncio import wait_for\nasync def f(x):\n    await wait_for(x, 1)\n") == [
        "crow_cli/x.py:3"]
    assert wait_for_calls(path, "async def f(c):\n    await c.wait_for(lambda: True)\n") == []  # a Condition's
