"""Imports point one way: leaves ← wire ← loop ← surfaces ← commands/cli; tools and sessions use leaves only.
A module takes only public names of another (ruff's PLC2701 holds that for other packages, not inside crow_cli)."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "crow_cli"
LEAVES = {"crow_cli.errors", "crow_cli.events", "crow_cli.history", "crow_cli.text", "crow_cli.private",
          "crow_cli.lockfile", "crow_cli.stdout", "crow_cli.paths",
          "crow_cli.atomic", "crow_cli.startup", "crow_cli.images"}
# module prefix -> crow_cli modules it may import (prefixes)
ALLOWED = {
    "crow_cli.errors": set(),
    "crow_cli.text": set(),
    "crow_cli.private": set(),
    "crow_cli.paths": set(),
    "crow_cli.atomic": set(),
    "crow_cli.startup": set(),
    "crow_cli.lockfile": {"crow_cli.private"},
    "crow_cli.images": set(),
    "crow_cli.history": {"crow_cli.images"},
    "crow_cli.events": {"crow_cli.history"},
    "crow_cli.wire": LEAVES | {"crow_cli.wire"},
    # profiles: provider data; names: the tool-name map (both pure, standard library only)
    "crow_cli.tools": LEAVES | {"crow_cli.tools", "crow_cli.wire.profiles", "crow_cli.wire.names"},
    "crow_cli.context": LEAVES | {"crow_cli.context", "crow_cli.wire"},
    "crow_cli.loop": LEAVES | {"crow_cli.wire", "crow_cli.tools", "crow_cli.context"},
    "crow_cli.signals": set(),
    "crow_cli.stdout": set(),
    "crow_cli.driver": LEAVES | {"crow_cli.loop", "crow_cli.signals", "crow_cli.tools", "crow_cli.context"},
    "crow_cli.sessions": LEAVES,
    "crow_cli.export": LEAVES | {"crow_cli.sessions"},
    "crow_cli.instructions": {"crow_cli.text", "crow_cli.paths"},
    "crow_cli.default_prompt": {"crow_cli.prompt_files"},
    "crow_cli.prompt_files": {"crow_cli.errors", "crow_cli.text", "crow_cli.paths", "crow_cli.instructions"},
    "crow_cli.attachments": LEAVES | {"crow_cli.tools"},
    "crow_cli.undo": LEAVES | {"crow_cli.sessions"},
    "crow_cli.local": LEAVES | {"crow_cli.config", "crow_cli.signals"},  # `serve` ends by the run scope
    "crow_cli.probe": LEAVES | {"crow_cli.config", "crow_cli.probe", "crow_cli.wire"},
    "crow_cli.config": LEAVES | {"crow_cli.wire.profiles", "crow_cli.wire.profile"},  # provider data (pure)
    # no surface handles a signal itself: the driver does (its Interrupts policies)
    "crow_cli.surfaces": LEAVES | {"crow_cli.config", "crow_cli.driver", "crow_cli.loop", "crow_cli.sessions",
                                   "crow_cli.surfaces", "crow_cli.tools", "crow_cli.wire", "crow_cli.context",
                                   "crow_cli.attachments", "crow_cli.instructions", "crow_cli.undo",
                                   "crow_cli.default_prompt", "crow_cli.export", "crow_cli.prompt_files"},
    "crow_cli.commands": LEAVES | {"crow_cli.commands", "crow_cli.config", "crow_cli.sessions", "crow_cli.export",
                                   "crow_cli.surfaces",
                                   "crow_cli.tools", "crow_cli.wire", "crow_cli.undo", "crow_cli.local",
                                   "crow_cli.probe", "crow_cli.prompt_files"},
    "crow_cli.cli": {"crow_cli", "crow_cli.commands", "crow_cli.config", "crow_cli.errors", "crow_cli.text",
                     "crow_cli.startup"},
    "crow_cli.__main__": {"crow_cli.cli"},
}
FORBIDDEN_THIRD_PARTY = {
    "crow_cli.wire": {"rich", "typer", "prompt_toolkit", "sqlite3"},
    "crow_cli.loop": {"rich", "typer", "prompt_toolkit", "sqlite3"},
    "crow_cli.context": {"rich", "typer", "prompt_toolkit", "sqlite3", "openai"},
    "crow_cli.driver": {"rich", "typer", "prompt_toolkit", "sqlite3", "openai"},
    "crow_cli.tools": {"rich", "typer", "prompt_toolkit"},
    "crow_cli.sessions": {"openai", "httpx", "rich", "typer", "prompt_toolkit"},
    "crow_cli.export": {"openai", "httpx", "rich", "typer", "prompt_toolkit"},
    "crow_cli.events": {"openai", "httpx", "rich", "typer"},
    "crow_cli.config": {"openai", "httpx", "rich", "typer", "prompt_toolkit"},
    "crow_cli.surfaces": {"typer"},
}


def modules():
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        yield ".".join(parts), path


def imports_of(name: str, path: Path) -> set[str]:
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                found.add(".".join([*base, node.module] if node.module else base))
            else:
                found.add(node.module or "")
    return found


def rule_for(name: str, table: dict) -> str | None:
    return max((p for p in table if name == p or name.startswith(p + ".")), key=len, default=None)


def offenders(name: str, path: Path) -> list[str]:
    """What `name` (at `path`) imports against the rules: a crow_cli module up the layers, a banned package."""
    imported = imports_of(name, path)
    found = []
    rule = rule_for(name, ALLOWED)
    if rule is not None:
        ours = {i for i in imported if i.startswith("crow_cli.")}  # bare `crow_cli`: its __version__, a leaf
        found += [f"{name} imports {i} (up the layers)" for i in sorted(ours)
                  if not any(i == a or i.startswith(a + ".") for a in ALLOWED[rule])]
    banned = FORBIDDEN_THIRD_PARTY.get(rule_for(name, FORBIDDEN_THIRD_PARTY) or "", set())
    found += [f"{name} imports {top} (banned there)" for top in sorted({i.split(".")[0] for i in imported} & banned)]
    return found


def test_imports_point_down_the_layers():
    # one test listing every offender (one case per module made a hundred cases to say one thing)
    found = [hit for name, path in modules() for hit in offenders(name, path)]
    assert found == []


def test_every_module_has_a_layer_rule():
    # The layer test covers every package (surfaces and config included) (issue 9)
    uncovered = [name for name, _ in modules() if name != "crow_cli" and rule_for(name, ALLOWED) is None]
    assert not uncovered, f"add a rule to ALLOWED for {uncovered}"


def test_package_import_is_cheap():
    import subprocess
    import sys

    code = "import sys, crow_cli.cli; print(sorted(m for m in ('openai', 'httpx', 'rich') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def private_imports(name: str, path: Path, text: str | None = None) -> list[str]:
    """`name imports MODULE._NAME` for each private name `name` (at `path`) takes from another crow_cli module."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text() if text is None else text)):
        if not isinstance(node, ast.ImportFrom) or not (node.level or (node.module or "").startswith("crow_cli")):
            continue
        base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
        module = ".".join([*base, node.module] if node.module else base) if node.level else node.module
        found += [f"{name} imports {module}.{a.name}" for a in node.names
                  if a.name.startswith("_") and not a.name.startswith("__")]
    return found


def test_a_module_imports_no_private_name_of_another():
    # a name another module needs is public (edits.py imported files._BOMS)
    assert [hit for name, path in modules() for hit in private_imports(name, path)] == []


# A run's tool context and driver are assembled in one place, `surfaces.runtime`: ACP's sessions built their own
# beside it (issue 31). `crow mcp`'s calls, each with its own model and folder, still assemble theirs.
ASSEMBLERS = {"crow_cli.surfaces.runtime", "crow_cli.surfaces.mcp_server"}
ASSEMBLY = {"Driver", "ToolContext", "ToolContext.for_workspace", "assemble_driver"}


def assemblies(name: str, path: Path, text: str | None = None) -> list[str]:
    """`name builds CALLED` for each driver or tool context `name` (at `path`) constructs itself (`ASSEMBLY`)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text() if text is None else text)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        called = func.id if isinstance(func, ast.Name) else \
            f"{func.value.id}.{func.attr}" if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
            else ""
        found += [f"{name} builds {called}"] if called in ASSEMBLY else []
    return found


def test_surfaces_take_their_tool_context_and_driver_from_the_runtime():
    found = [hit for name, path in modules() if name.startswith("crow_cli.surfaces.") and name not in ASSEMBLERS
             for hit in assemblies(name, path)]
    assert found == []


def test_the_layer_rules_catch_what_they_name(tmp_path):
    source = "from .files import _BOMS, file_type\nfrom crow_cli.text import _CONTROL\nfrom . import files\n"
    assert private_imports("crow_cli.tools.x", PKG / "tools" / "x.py", source) == [
        "crow_cli.tools.x imports crow_cli.tools.files._BOMS", "crow_cli.tools.x imports crow_cli.text._CONTROL"]
    built = "d = Driver(c)\nt = ToolContext.for_workspace(p)\nassemble_driver(s)\nruntime.new_driver(a)\n"
    assert assemblies("crow_cli.surfaces.x", PKG / "surfaces" / "x.py", built) == [
        "crow_cli.surfaces.x builds Driver", "crow_cli.surfaces.x builds ToolContext.for_workspace",
        "crow_cli.surfaces.x builds assemble_driver"]
    fake = tmp_path / "fake.py"
    fake.write_text("from ..surfaces import chat\nimport rich\nfrom . import stream\n")
    assert offenders("crow_cli.wire.fake", fake) == ["crow_cli.wire.fake imports crow_cli.surfaces (up the layers)",
                                                     "crow_cli.wire.fake imports rich (banned there)"]
