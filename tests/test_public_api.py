"""Public APIs only: no code reaches a private member (`x._name`) of another object or module.

Walks the AST of crow_cli and of the tests: an attribute starting with one underscore may only be read
through `self` or `cls`. A private member of a dependency (the openai SDK, httpx) breaks on a patch
release; a test that reads one of ours tests what no user can call (issue 9 for the SDK, issue 18 for
the tests: `store._db`, `client._transport`).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SKIPPED = {"tests/replay_server.py"}
"""A verbatim copy of ../shared/conformance/replay_server.py: not ours to change."""
ALLOWED = {
    "os._exit",  # the documented way to end a process without cleanup (signals.exit_now, a test server)
    "tail._add",  # tools/mcp_transport.py: the object itself (`tail = self`) called from a nested protocol class
}
"""`value._name` texts allowed anywhere. Shrink this set; never grow it where a public API serves."""


def private_access(path: Path, text: str | None = None) -> list[str]:
    """`file:line: expr` for every `x._name` (x not self/cls) and every import of a private module or
    name from outside crow_cli, in `path` (or in `text`, as if it were `path`'s)."""
    tree = ast.parse(path.read_text() if text is None else text, str(path))
    rel = path.relative_to(ROOT)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            if ast.unparse(node) not in ALLOWED:
                found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom) and (node.level or node.module in ("crow_cli", None)
                                                   or (node.module or "").startswith("crow_cli.")):
            private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
            if rel.parts[0] == "crow_cli" and private:  # tests: tests/test_layout.py keeps their list
                found.append(f"{rel}:{node.lineno}: from {'.' * node.level}{node.module or ''} import "
                             f"{', '.join(private)}")
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            top = node.module.split(".")[0]
            if top in ("tests", "__future__"):
                continue
            names = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
            if any(part.startswith("_") for part in node.module.split(".")) or names:
                found.append(f"{rel}:{node.lineno}: from {node.module} import {', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.Import):
            found += [f"{rel}:{node.lineno}: import {a.name}" for a in node.names
                      if any(p.startswith("_") and not p.startswith("__") for p in a.name.split("."))]
    return found


def _sources() -> list[Path]:
    return sorted(p for folder in (ROOT / "crow_cli", ROOT / "tests") for p in folder.rglob("*.py")
                  if str(p.relative_to(ROOT)) not in SKIPPED)


def test_no_private_member_of_another_object_is_used() -> None:
    offenders = [hit for path in _sources() for hit in private_access(path)]
    assert offenders == [], "use a public API (or a fixture):\n" + "\n".join(offenders)


def test_a_module_imports_no_private_name_of_another() -> None:
    # issue 18: edits.py imported files._BOMS; a name another module needs is public
    source = "from .files import _BOMS, file_type\nfrom crow_cli.text import _CONTROL\nfrom . import files\n"
    assert private_access(ROOT / "crow_cli" / "tools" / "x.py", source) == [
        "crow_cli/tools/x.py:1: from .files import _BOMS", "crow_cli/tools/x.py:2: from crow_cli.text import _CONTROL"]
    assert private_access(ROOT / "tests" / "x.py", source) == []


def test_the_check_catches_what_it_names() -> None:
    here = ROOT / "tests" / "x.py"
    source = ("store._db.execute('x')\nself._ok = 1\ncls._ok = 2\nfrom openai._models import BaseModel\n"
              "from httpx import _transports\nimport openai._streaming\nclient._transport.inner\nos._exit(1)\n")
    assert sorted(hit.split(": ", 1)[1] for hit in private_access(here, source)) == [
        "client._transport", "from httpx import _transports", "from openai._models import BaseModel",
        "import openai._streaming", "store._db"]
