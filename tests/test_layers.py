"""Imports point one way: leaves ← wire ← loop ← surfaces ← commands/cli; tools and sessions use leaves only.
A module takes only public names of another (ruff's PLC2701 holds that for other packages, not inside crow_cli)."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "crow_cli"
LEAVES = {"crow_cli.errors", "crow_cli.events", "crow_cli.history", "crow_cli.text", "crow_cli.private",
          "crow_cli.lockfile", "crow_cli.stdout", "crow_cli.paths",
          "crow_cli.atomic", "crow_cli.startup", "crow_cli.images", "crow_cli.modes", "crow_cli.todos"}
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
    "crow_cli.modes": set(),
    "crow_cli.todos": set(),
    "crow_cli.history": {"crow_cli.images", "crow_cli.modes", "crow_cli.todos"},
    "crow_cli.events": {"crow_cli.history", "crow_cli.todos"},
    "crow_cli.wire": LEAVES | {"crow_cli.wire"},
    # profiles: provider data; names: the tool-name map (both pure, standard library only)
    # skills: the `skill` tool loads one; proxy, tls: web_fetch reaches the web with the proxy and TLS settings
    # every client of crow uses
    "crow_cli.tools": LEAVES | {"crow_cli.tools", "crow_cli.wire.profiles", "crow_cli.wire.names",
                                "crow_cli.skills", "crow_cli.wire.proxy", "crow_cli.wire.tls"},
    "crow_cli.context": LEAVES | {"crow_cli.context", "crow_cli.wire"},
    "crow_cli.loop": LEAVES | {"crow_cli.wire", "crow_cli.tools", "crow_cli.context"},
    "crow_cli.signals": set(),
    "crow_cli.stdout": set(),
    "crow_cli.driver": LEAVES | {"crow_cli.loop", "crow_cli.signals", "crow_cli.tools", "crow_cli.context"},
    "crow_cli.sessions": LEAVES,
    "crow_cli.export": LEAVES | {"crow_cli.sessions"},
    "crow_cli.instructions": {"crow_cli.text", "crow_cli.paths"},
    "crow_cli.default_prompt": {"crow_cli.prompt_files", "crow_cli.modes"},
    "crow_cli.trust": {"crow_cli.atomic", "crow_cli.instructions", "crow_cli.private"},
    "crow_cli.prompt_files": {"crow_cli.errors", "crow_cli.text", "crow_cli.paths", "crow_cli.instructions"},
    "crow_cli.front_matter": {"crow_cli.errors"},
    "crow_cli.skills": {"crow_cli.errors", "crow_cli.text", "crow_cli.paths", "crow_cli.instructions",
                        "crow_cli.prompt_files", "crow_cli.front_matter", "crow_cli.trust"},
    "crow_cli.agents": {"crow_cli.errors", "crow_cli.text", "crow_cli.paths", "crow_cli.instructions",
                        "crow_cli.prompt_files", "crow_cli.front_matter"},
    "crow_cli.attachments": LEAVES | {"crow_cli.tools"},
    "crow_cli.undo": LEAVES | {"crow_cli.sessions", "crow_cli.rewind"},  # an exchange with snapshots: a rewind
    "crow_cli.rewind": LEAVES | {"crow_cli.sessions"},
    "crow_cli.local": LEAVES | {"crow_cli.config", "crow_cli.signals"},  # `serve` ends by the run scope
    # tools.arguments: `probe --tools` checks a call's arguments as a run would (pure: jsonschema, errors)
    "crow_cli.probe": LEAVES | {"crow_cli.config", "crow_cli.probe", "crow_cli.wire", "crow_cli.tools.arguments"},
    # provider data and the check of configured request rules (pure)
    "crow_cli.config": LEAVES | {"crow_cli.wire.profiles", "crow_cli.wire.profile", "crow_cli.wire.rules.check"},
    # no surface handles a signal itself: the driver does (its Interrupts policies)
    "crow_cli.surfaces": LEAVES | {"crow_cli.config", "crow_cli.driver", "crow_cli.loop", "crow_cli.sessions",
                                   "crow_cli.surfaces", "crow_cli.tools", "crow_cli.wire", "crow_cli.context",
                                   "crow_cli.attachments", "crow_cli.instructions", "crow_cli.undo", "crow_cli.rewind",
                                   "crow_cli.default_prompt", "crow_cli.export", "crow_cli.prompt_files",
                                   "crow_cli.trust", "crow_cli.skills",
                                   "crow_cli.agents",
                                   "crow_cli.probe.models"},  # chat's /model lists the server's models
    "crow_cli.commands": LEAVES | {"crow_cli.commands", "crow_cli.config", "crow_cli.sessions", "crow_cli.export",
                                   "crow_cli.surfaces",
                                   "crow_cli.tools", "crow_cli.wire", "crow_cli.undo", "crow_cli.local",
                                   "crow_cli.probe", "crow_cli.prompt_files", "crow_cli.trust", "crow_cli.skills",
                                   "crow_cli.agents"},
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
    # The layer test covers every package (surfaces and config included)
    uncovered = [name for name, _ in modules() if name != "crow_cli" and rule_for(name, ALLOWED) is None]
    assert not uncovered, f"add a rule to ALLOWED for {uncovered}"


SIGNAL_OWNERS = {"uncancel", "add_signal_handler", "remove_signal_handler", "set_wakeup_fd", "Interrupts", "RunScope"}
"""What takes part in signal -> cancel -> uncancel -> exit code: the driver's run scope does, no surface."""


def signal_handling(name: str, path: Path, text: str | None = None) -> list[str]:
    """`name calls X` for each call in `name` (at `path`) that handles signals or takes a cancellation back,
    and `name imports signal`: what only `driver.RunScope` (through `signals.Interrupts`) may do."""
    found = []
    for node in ast.walk(ast.parse(path.read_text() if text is None else text)):
        if isinstance(node, ast.Call):
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if called in SIGNAL_OWNERS:
                found.append(f"{name} calls {called}")
        elif isinstance(node, ast.Import):
            found += [f"{name} imports signal" for a in node.names if a.name.split(".")[0] == "signal"]
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "signal":
            found.append(f"{name} imports signal")
    return found


def test_no_surface_handles_a_signal_or_takes_a_cancellation_back():
    # surfaces choose a policy (`driver.run_interrupts` ...) and read `RunScope.finished`; run.py, chat.py and
    # runtime.py each wrote signal -> cancel -> uncancel -> exit code themselves before the run scope
    found = [hit for name, path in modules() if name.startswith("crow_cli.surfaces")
             for hit in signal_handling(name, path)]
    assert found == []
    source = "import signal\nfrom . import signal as s\ntask.uncancel()\nloop.add_signal_handler(2, f)\nInterrupts()\n"
    assert signal_handling("crow_cli.surfaces.x", PKG / "surfaces" / "x.py", source) == [
        "crow_cli.surfaces.x imports signal", "crow_cli.surfaces.x calls uncancel",
        "crow_cli.surfaces.x calls add_signal_handler", "crow_cli.surfaces.x calls Interrupts"]


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


# Who builds the parts of a run: one owner each. The approver from settings (`surfaces.approve`, over
# `tools.approval`'s constructors), the tool context (`surfaces.runtime`, over `tools.context`; dispatch's default
# is the working directory with no secrets), the driver (`surfaces.runtime`; `crow mcp`'s calls, each with its own
# model, call its `assemble_driver`), and the stdio JSON-RPC transport of `crow acp` and `crow mcp`
# (`surfaces.stdio`; `tools.mcp_transport` reads an MCP server's stderr through a pipe of its own).
BUILDERS: dict[str, tuple[set[str], set[str]]] = {
    "an approver": ({"make_approver", "Approvals", "ApprovalPolicy"},
                    {"crow_cli.tools.approval", "crow_cli.surfaces.approve"}),
    "a tool context": ({"ToolContext", "ToolContext.for_workspace"},
                       {"crow_cli.tools.context", "crow_cli.tools.dispatch", "crow_cli.surfaces.runtime"}),
    "a driver": ({"Driver", "assemble_driver"}, {"crow_cli.surfaces.runtime", "crow_cli.surfaces.mcp_server"}),
    "a stdio transport": ({"connect_read_pipe", "connect_write_pipe", "ProtocolOutput"},
                          {"crow_cli.surfaces.stdio", "crow_cli.tools.mcp_transport"}),
}


def builds(name: str, path: Path, text: str | None = None) -> list[str]:
    """`name builds WHAT (CALLED, line N)` for each part of a run (`BUILDERS`) that `name` (at `path`) constructs
    and is not listed as an owner of."""
    found = []
    for node in ast.walk(ast.parse(path.read_text() if text is None else text)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        called = {func.id} if isinstance(func, ast.Name) else {func.attr} | (
            {f"{func.value.id}.{func.attr}"} if isinstance(func.value, ast.Name) else set()) \
            if isinstance(func, ast.Attribute) else set()
        for what, (constructors, owners) in BUILDERS.items():
            found += [f"{name} builds {what} ({hit}, line {node.lineno})" for hit in sorted(called & constructors)
                      if name not in owners]
    return found


def test_each_part_of_a_run_has_one_builder():
    # one builder each for the approver, the tool context and the stdio transport: no surface or command builds
    # its own
    assert [hit for name, path in modules() for hit in builds(name, path)] == []
    listed = {owner for _, owners in BUILDERS.values() for owner in owners}
    assert listed <= {name for name, _ in modules()}, "a listed builder no longer exists"


def test_the_layer_rules_catch_what_they_name(tmp_path):
    source = "from .files import _BOMS, file_type\nfrom crow_cli.text import _CONTROL\nfrom . import files\n"
    assert private_imports("crow_cli.tools.x", PKG / "tools" / "x.py", source) == [
        "crow_cli.tools.x imports crow_cli.tools.files._BOMS", "crow_cli.tools.x imports crow_cli.text._CONTROL"]
    built = ("d = Driver(c)\nt = ToolContext.for_workspace(p)\nassemble_driver(s)\nruntime.new_driver(a)\n"
             "a = make_approver('ask')\nruntime.context_for(p)\nawait loop.connect_write_pipe(ProtocolOutput, f)\n")
    assert builds("crow_cli.surfaces.x", PKG / "surfaces" / "x.py", built) == [
        "crow_cli.surfaces.x builds a driver (Driver, line 1)",
        "crow_cli.surfaces.x builds a tool context (ToolContext.for_workspace, line 2)",
        "crow_cli.surfaces.x builds a driver (assemble_driver, line 3)",
        "crow_cli.surfaces.x builds an approver (make_approver, line 5)",
        "crow_cli.surfaces.x builds a stdio transport (connect_write_pipe, line 7)"]
    fake = tmp_path / "fake.py"
    fake.write_text("from ..surfaces import chat\nimport rich\nfrom . import stream\n")
    assert offenders("crow_cli.wire.fake", fake) == ["crow_cli.wire.fake imports crow_cli.surfaces (up the layers)",
                                                     "crow_cli.wire.fake imports rich (banned there)"]


# The orchestrator (`tools.orchestrator`) is the one caller of the approver and the one place a call is run
# outside the sandbox; the others take from `tools.approval` and `tools.sandbox` only what builds a run
# (a policy, the sandbox's mode) and asks or shows a question. Module -> the names it may import from them.
APPROVAL_USERS = {
    "crow_cli.tools.orchestrator": {"Approvals", "Deny", "may_write"},
    "crow_cli.surfaces.run": {"Answer", "AskFn", "Choice", "Question"},
    "crow_cli.surfaces.chat.app": {"Answer", "PlanAnswer", "Question"},
    "crow_cli.surfaces.approve": {"ASK_CHOICES", "Answer", "Approvals", "AskFn", "Choice", "PlanAnswer", "Policy",
                                  "Question", "make_approver", "start_policy"},
    "crow_cli.surfaces.ask": {"Answer", "Question"},
    "crow_cli.surfaces.shell_escape": {"Approvals"},
    "crow_cli.surfaces.mcp_server": {"Choice", "Policy", "Question"},
    "crow_cli.surfaces.runtime": {"check_rule_names"},
    "crow_cli.surfaces.acp.session": {"Answer", "Approvals", "PlanAnswer", "Policy", "Question"},
    "crow_cli.surfaces.persist": {"Policy"},
}
SANDBOX_USERS = {
    "crow_cli.tools.orchestrator": {"Sandbox", "SandboxBlocked"},
    "crow_cli.tools.approval": {"backend", "is_guarded", "unavailable_reason"},
    "crow_cli.tools.context": {"Sandbox"},
    "crow_cli.tools.builtin.shell": "*",  # the tool the sandbox confines: it wraps its commands
    "crow_cli.surfaces.runtime": {"Sandbox", "home_notice", "startup_notice"},
    "crow_cli.surfaces.mcp_server": {"Mode", "Sandbox"},
    "crow_cli.surfaces.persist": {"Mode"},
    "crow_cli.surfaces.acp.session": {"Mode", "Sandbox"},
}
ORCHESTRATED = {"crow_cli.tools.approval": APPROVAL_USERS, "crow_cli.tools.sandbox": SANDBOX_USERS}


def taken_from(name: str, path: Path, module: str, text: str | None = None) -> set[str]:
    """The names `name` (at `path`) imports from `module` (`"*"` for `import module` itself)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    taken: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text() if text is None else text)):
        if isinstance(node, ast.Import):
            taken |= {"*" for a in node.names if a.name == module}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            source = ".".join([*base, node.module] if node.module else base) if node.level else node.module
            if source == module:
                taken |= {a.name for a in node.names}
            elif source == module.rsplit(".", 1)[0]:  # `from . import approval`
                taken |= {"*" for a in node.names if a.name == module.rsplit(".", 1)[1]}
    return taken


def orchestration_offenders(name: str, path: Path, text: str | None = None) -> list[str]:
    """What `name` takes from the approver or the sandbox beyond what its entry above allows, and any
    `.escalate(…)` call outside the orchestrator (the question of running a call outside the sandbox)."""
    found = []
    for module, users in ORCHESTRATED.items():
        if name == module:
            continue
        allowed = users.get(name, set())
        taken = taken_from(name, path, module, text)
        if allowed != "*":
            found += [f"{name} imports {module}.{n}" for n in sorted(taken - set(allowed))]
    if name != "crow_cli.tools.orchestrator":
        tree = ast.parse(path.read_text() if text is None else text)
        found += [f"{name} calls .escalate() (line {node.lineno})" for node in ast.walk(tree)
                  if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr == "escalate"]
    return found


def test_only_the_orchestrator_calls_the_approver_and_the_sandbox():
    # one owner for a tool call's fate: only the orchestrator escalates, and a module takes from the approver or
    # the sandbox only what its entry in ORCHESTRATED allows
    assert [hit for name, path in modules() for hit in orchestration_offenders(name, path)] == []
    listed = {name for users in ORCHESTRATED.values() for name in users}
    assert listed <= {name for name, _ in modules()}, "a listed module no longer exists"


def test_the_orchestration_rule_catches_what_it_names():
    source = ("from ..tools.approval import decide, make_approver\nfrom ..tools import sandbox\n"
              "async def f(a, c, t):\n    return await a.escalate(c, t, 'why')\n")
    assert orchestration_offenders("crow_cli.surfaces.run", PKG / "surfaces" / "run.py", source) == [
        "crow_cli.surfaces.run imports crow_cli.tools.approval.decide",
        "crow_cli.surfaces.run imports crow_cli.tools.approval.make_approver",
        "crow_cli.surfaces.run imports crow_cli.tools.sandbox.*",
        "crow_cli.surfaces.run calls .escalate() (line 4)"]


def decided_by_name_or_text(name: str, path: Path, builtin: set[str], text: str | None = None) -> list[str]:
    """Where surface module `name` compares with a built-in tool's name (`== "run_shell"`, `in (…)`, a
    `case "run_shell":`) or looks at a result's text for how it ended (`startswith("Error")`)."""
    def constants(node: ast.AST) -> list[str]:
        return [c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and isinstance(c.value, str)]

    found = []
    for node in ast.walk(ast.parse(path.read_text() if text is None else text)):
        if isinstance(node, ast.Compare):
            named = [v for part in (node.left, *node.comparators) for v in constants(part) if v in builtin]
            found += [f"{name} compares with the tool name {v!r} (line {node.lineno})" for v in named]
        elif isinstance(node, ast.MatchValue):
            found += [f"{name} matches the tool name {v!r} (line {node.lineno})" for v in constants(node)
                      if v in builtin]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                "startswith", "endswith") and any(v.startswith(("Error", "[exit code")) for a in node.args
                                                  for v in constants(a)):
            found += [f"{name} reads how a call ended from its text (line {node.lineno})"]
    return found


def test_no_surface_decides_by_a_tool_name_or_a_results_text():
    # what happens to a call is the orchestrator's, and how it ended is the result's `outcome`
    from crow_cli.tools.builtin import BUILTIN_TOOLS

    builtin = {t.name for t in BUILTIN_TOOLS}
    surfaces = [(name, path) for name, path in modules() if name.startswith(("crow_cli.surfaces", "crow_cli.loop",
                                                                             "crow_cli.driver"))]
    assert [hit for name, path in surfaces for hit in decided_by_name_or_text(name, path, builtin)] == []
    source = ('if call.name == "run_shell":\n    pass\nmatch n:\n    case "write_file":\n        pass\n'
              'ok = not out.startswith("Error:")\n')
    assert decided_by_name_or_text("crow_cli.surfaces.x", PKG / "x.py", builtin, source) == [
        "crow_cli.surfaces.x compares with the tool name 'run_shell' (line 1)",
        "crow_cli.surfaces.x matches the tool name 'write_file' (line 4)",
        "crow_cli.surfaces.x reads how a call ended from its text (line 6)"]
