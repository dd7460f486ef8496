"""The tests mirror crow_cli: each test module sits where the code it guards sits, none is named after a
person or a round of testing, and none imports another test module (shared helpers: conftest.py fixtures
or tests/support.py)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
PACKAGE = TESTS.parent / "crow_cli"

NOT_MIRRORS = {
    "test_layers.py": "the import direction of every crow_cli module",
    "test_layout.py": "this file: the layout of the tests",
    "test_cases_real.py": "the recorded real-server cases, through the whole stack",
    "test_smoke_llama.py": "a smoke run against a real llama.cpp server",
    "test_wheel.py": "the built wheel, installed as a tool in a fresh venv",
}
"""Test modules that guard the project as a whole, so they mirror no single module."""

PERSON_OR_ROUND = re.compile(r"tester|defect|round|new_user|fixes", re.IGNORECASE)


def _test_modules() -> list[Path]:
    return sorted(p for p in TESTS.rglob("test_*.py") if ".venv" not in p.parts)


def _names_below(package: Path, *, recursive: bool) -> set[str]:
    """Module and package names in `package` (and, if `recursive`, in its subpackages)."""
    names = set()
    for path in package.rglob("*") if recursive else package.iterdir():
        if path.suffix == ".py" and path.stem != "__init__":
            names.add(path.stem)
        elif path.is_dir() and (path / "__init__.py").exists():
            names.add(path.name)
    return names


def _mirrors(test: Path) -> bool:
    """tests/test_<m>[_topic].py mirrors crow_cli/<m>; tests/<pkg>/test_<m>[_topic].py mirrors a module of
    crow_cli/<pkg>/ or one below it (tests/tools/test_shell.py: crow_cli/tools/builtin/shell.py)."""
    rel = test.relative_to(TESTS)
    package = PACKAGE.joinpath(*rel.parts[:-1])
    if not (package / "__init__.py").exists():
        return False
    stem = test.stem.removeprefix("test_")
    names = _names_below(package, recursive=package != PACKAGE)
    return any(stem == name or stem.startswith(name + "_") for name in names)


def _imports(path: Path, text: str | None = None) -> list[tuple[str, list[str]]]:
    """(module, imported names) for every import in `path` (or in `text`, as if it were `path`'s);
    relative imports resolved against tests/."""
    tree = ast.parse(path.read_text() if text is None else text, str(path))
    here = ".".join(("tests", *path.relative_to(TESTS).parts[:-1]))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = here.split(".")[: len(here.split(".")) - node.level + 1]
                module = ".".join([*base, module] if module else base)
            names = [alias.name for alias in node.names]
            found.append((module, names))
            found += [(f"{module}.{name}", []) for name in names]  # `from tests.tools import test_x`
    return found


def _py_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if ".venv" not in p.parts)


# One test per rule, listing every offender (one case per file made hundreds of cases to say one thing).

def test_no_file_is_named_after_a_person_or_a_round_of_testing() -> None:
    offenders = [str(p.relative_to(TESTS)) for p in _py_files() if PERSON_OR_ROUND.search(str(p.relative_to(TESTS)))]
    assert offenders == [], ("name a test file after the code it guards; say where a bug came from in a comment "
                             "beside its test")


def test_every_test_module_mirrors_a_crow_cli_module() -> None:
    offenders = [str(t.relative_to(TESTS)) for t in _test_modules()
                 if not (t.name in NOT_MIRRORS and t.parent == TESTS) and not _mirrors(t)]
    assert offenders == [], ("these mirror no crow_cli module: put each test in "
                             "tests/<package>/test_<module>[_topic].py of the code it guards")


def test_no_test_module_is_imported() -> None:
    offenders = [f"{path.relative_to(TESTS)} imports {module}" for path in _py_files() for module, _ in _imports(path)
                 if module.startswith("tests") and module.rsplit(".", 1)[-1].startswith("test_")]
    assert offenders == [], "shared helpers go to tests/support.py (fixtures to conftest.py)"


def test_the_layout_rules_catch_what_they_name() -> None:
    assert _mirrors(TESTS / "tools" / "test_shell_escapes.py") and _mirrors(TESTS / "test_loop_stream_retry.py")
    assert not _mirrors(TESTS / "tools" / "test_third_tester_tools.py")
    assert not _mirrors(TESTS / "test_files.py")  # tools/builtin/files.py is tested in tests/tools/
    assert not _mirrors(TESTS / "scripting" / "test_jsonl.py")  # no crow_cli/scripting package
    assert PERSON_OR_ROUND.search("tests/test_second_tester_defects.py")
    source = "from tests.surfaces.test_chat import chat\nfrom .test_shell import alive\nfrom . import test_mcp\n"
    modules = {m for m, _ in _imports(TESTS / "tools" / "x.py", source)}
    assert {"tests.surfaces.test_chat", "tests.tools.test_shell", "tests.tools.test_mcp"} <= modules
